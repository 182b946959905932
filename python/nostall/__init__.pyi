"""Type stubs of the nostall package."""

from . import audio as audio
from . import ops as ops
from . import video as video
from ._analyze import AnalysisReport as AnalysisReport
from ._analyze import analyze as analyze
from ._analyze import time_model as time_model
from ._dataloader import DataLoader as DataLoader
from ._errors import AgentError as AgentError
from ._errors import ConfigError as ConfigError
from ._errors import NostallError as NostallError
from ._errors import PeerError as PeerError
from ._errors import SampleError as SampleError
from ._errors import StepError as StepError
from ._errors import StorageError as StorageError
from ._nostall import BatchTensor as BatchTensor
from ._nostall import Field as Field
from ._loader import Loader as Loader
from ._nostall import Mixup as Mixup
from ._remote import Remote as Remote
from ._remote import Scaling as Scaling
from ._nostall import Tokenizer as Tokenizer
from ._nostall import __version__ as __version__
from ._nostall import demo_photos as demo_photos
from ._nostall import imagenet_train as imagenet_train
from ._nostall import imagenet_val as imagenet_val
from ._user_code import sample_generator as sample_generator

__all__ = [
    "AgentError",
    "AnalysisReport",
    "BatchTensor",
    "ConfigError",
    "DataLoader",
    "Field",
    "Loader",
    "Mixup",
    "NostallError",
    "PeerError",
    "Remote",
    "SampleError",
    "Scaling",
    "StepError",
    "StorageError",
    "Tokenizer",
    "__version__",
    "analyze",
    "audio",
    "demo_photos",
    "imagenet_train",
    "imagenet_val",
    "ops",
    "sample_generator",
    "time_model",
    "video",
]
