//! `nostall.Loader`: its arguments converted ([`crate::convert`]) into the engine's
//! settings, batches from its own threads or the node agent's group ([`crate::shared`]),
//! its state and figures.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};

use nostall::cache::CacheFill;
use nostall::dataset::LabelColumn;
use nostall::pipeline::Next;
use nostall::prep::image::Layout;
use nostall::prep::route::DecodeRoute;
use nostall::prep::DType;
use nostall::storage::ReadMode;
use nostall::{EpochStats, Position};
use nostall::{ErrorPolicy, Shard};
use nostall_agent::{JobBuilder, Share};
use nostall_peer::NodeConfig;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::convert::{
    Bytes, CacheChoice, CacheSize, ConfigArgs, PipelineArg, SourceArg, Text, ThreadsArg,
};
use crate::dlpack::Owner;
use crate::errors::{config_error, job_error, raise, raise_peer};
use crate::fields::{FieldsArg, Records};
use crate::interrupt::{interruptible, SIGNAL_CHECK};
use crate::mix::Mixup;
use crate::mixture::SourceCounts;
use crate::python_ops::PythonOps;
use crate::stats::{node_dict, stats_dict};
use crate::tensor::{objects, resolve_output, shared_objects, split_views, Output};
use crate::{arrow, device, live, shared, state, user};

/// A data loader: iterate over it for the `(images, labels)` batches of one epoch.
///
/// Arguments (all but `source` keyword-only):
///
/// - `source`: an image folder (one sub-folder per class, or flat), a folder of
///   WebDataset `.tar` shards, or `s3://bucket/prefix` (endpoint and credentials from the
///   usual `AWS_*` variables). The folder is indexed once; later starts load the index.
///   For audio, also a manifest of segments of long recordings (`.jsonl`/`.json` as NeMo
///   writes them: `audio_filepath`, `offset`, `duration`, `label`; or `.csv` with
///   `path,start,duration,label`): one sample per segment, each read and cropped within
///   its segment (docs/audio.md, "Long recordings"). A list of locations mixes several
///   datasets (see `weights`).
/// - `batch_size` (64): samples per batch on this rank.
/// - `pipeline` (`"train"`): a list of `nostall.ops` operators, e.g.
///   `[ops.RandomResizedCrop(224), ops.RandomHorizontalFlip(), ops.Normalize(mean, std)]`,
///   or a preset: `"train"` is RandomResizedCrop(`image_size`), random horizontal flip,
///   ImageNet normalisation (`nostall.imagenet_train(image_size)`); `"val"` resizes the
///   shorter side to `image_size * 256/224`, centre-crops `image_size` and normalises
///   (`nostall.imagenet_val(image_size)`). A list may also be given as text, as Python
///   writes it (`repr(pipeline)`): what the command line's `--pipeline` takes.
/// - `image_size` (None: 224): output height and width of the `"train"` and `"val"`
///   presets; an operator list sets its sizes in its operators.
/// - `dtype` (`"float32"`): `"float32"` (normalised when the pipeline has `Normalize`,
///   else in [0, 1]) or `"uint8"` (0-255, a quarter of the bytes; leave `Normalize` out
///   and normalise on the GPU).
/// - `layout` (`"CHW"`): `"CHW"` (channels first, PyTorch) or `"HWC"` (channels last).
/// - `shuffle` (True), `seed` (0): the order is a function of (seed, epoch) only.
/// - `drop_last` (False): leave out the last, incomplete batch.
/// - `shard` (`"pad"`): how an epoch that does not divide among the ranks is evened out:
///   `"pad"` repeats a few samples, `"drop"` leaves the tail of the permutation out
///   (`DistributedSampler(drop_last=...)`; `drop_last` is the DataLoader's).
/// - `aug_repeats` (1): repeated augmentation, as DeiT's and torchvision's `RASampler`
///   (timm's `--aug-repeats`): each sample drawn into the epoch this many times (up to
///   16), its repeats dealt to consecutive ranks, each repeat its own augmentation; an
///   epoch on each rank is `len // 256 * 256 // world_size` samples long, as theirs
///   (`ceil(len / world_size)` under 256 samples). Resumes on the same number of ranks.
/// - `threads` (None: `"auto"`): the most workers decoding and transforming at once, or
///   `"auto"`: this process's share of the cores it may use (its CPU affinity and cgroup
///   CPU quota, shared among the node's torchrun ranks, `LOCAL_WORLD_SIZE`: see
///   `balance_ranks`). The loader's workers are one pool: fewer prepare while the
///   training loop takes batches slower than they could come (the cores are left to a
///   step that is itself CPU), and reads in flight take workers as the storage needs.
/// - `balance_ranks` (None: on unless `threads` is a number): under torchrun with several
///   ranks on a node, the ranks share the node's prep threads in proportion to the work
///   each has per iteration (measured CPU time per byte × the bytes their plans read
///   next), through a table in `/dev/shm` only this user can open; a rank whose batches
///   cost more gets more threads, so that the job does not wait for it.
/// - `fetch_threads` (None: 128): the most reads in flight. How many run follows the
///   observed read latency (Little's law: twice the rate prep takes samples at, times a
///   read's time), from 2 on local storage to dozens on object storage.
/// - `prefetch` (None: 4): batches prepared ahead of the training loop.
/// - `overlap_epochs` (True): start reading and preparing the next epoch while this
///   one's last batches are consumed, so that the training loop does not wait at epoch
///   boundaries; the next `iter()` takes that work when it starts the next epoch from
///   its start, and discards it otherwise. The first epoch is started the same way as
///   the loader is made (and a state given to `load_state_dict` as it is given), so
///   that its first batches are ready once the script has made its model. While epochs
///   overlap, batch buffers reach twice `prefetch`. Off with
///   `cache_policy="partitioned"`, whose nodes meet before each epoch.
/// - `cache` (None): keep encoded samples in memory across epochs: `"35%"` or `0.35` of
///   the dataset, `"2GiB"`, or a number of bytes; `cache_policy` `"minio"` (never
///   evicts, never thrashes; with `cache_fill="before"` the dataset's first samples that
///   fit are read before the first epoch), `"lookahead"` (reads the plan's next epoch:
///   keeps the samples this rank reads soonest; with several ranks it hits more than
///   `"minio"`),
///   `"frequency"` (NoPFS: keeps the samples this rank reads most often over
///   `cache_epochs` epochs, read ahead in the background, or before the loader's first
///   read with `cache_fill="before"`, as `nostall simulate cache` assumes), `"lru"`, or
///   `"partitioned"`: each node of a multi-node
///   job caches a different part of that size, serves it to the other nodes, and
///   ranks take the samples their node holds (locality-aware batches). Nodes and
///   peers come from torchrun's environment (`RANK`, `WORLD_SIZE`,
///   `LOCAL_WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`; the peer service listens on
///   `MASTER_PORT + 1`, or `NOSTALL_PEER_PORT`) or `NOSTALL_PEERS`; every node needs
///   the same `NOSTALL_PEER_SECRET`. Keep the loader alive until every rank is done
///   (e.g. `torch.distributed.barrier()` before exiting): its node serves the others.
///   With `share="auto"` (or a name) the node agent joins the job for the node and
///   prepares every local rank's batches: the node's part is read in the agent's
///   memory, not over loopback TCP from local rank 0 (`metrics["partitioned"]` are then
///   the node's counters, for all its local ranks; `served_local_bytes` counts what a
///   node's service sent to its own ranks), the nodes meet before each epoch, and the
///   agent keeps the node's service up until every node has finished.
/// - `memory` (None): bytes (`"2GiB"`, or a number) for batch buffers, read-ahead and
///   cache together: the pipeline is paid first (read-ahead, then prefetch, shrunk to
///   fit), decoded Parquet pages a quarter (`group_memory`), the cache the rest;
///   `loader.memory_plan` says how it was split.
/// - `group_memory` (None): Parquet: bytes for decoded pages (or row groups), which sets
///   how many are open at once (the order's mix when the dataset does not fit): 1 GiB,
///   or a quarter of `memory`.
/// - `on_error` (`"error"`): a bad sample raises `SampleError`; `"skip"` leaves it
///   out, fills its place with the next sample and counts it by cause.
/// - `quarantine` (None): with `on_error="skip"`, a file to which every skipped sample is
///   appended as a JSON line (`epoch`, `sample_id`, `location`, `cause`, `detail`).
/// - `rank`, `world_size` (None: `RANK` / `WORLD_SIZE` from the environment, as set
///   by torchrun, else 0 and 1): this rank reads its shard; every rank gets the same
///   number of batches.
/// - `output` (`"auto"`): `"torch"` tensors, `"numpy"` arrays, `"dlpack"`
///   (`BatchTensor`s), or `"auto"` (torch when importable, else numpy).
/// - `metrics_addr` (None: `NOSTALL_METRICS_ADDR`, else off): serve live metrics for
///   Prometheus at this `host:port` (`GET /metrics`): the stall per batch as a
///   histogram, each stage's busy time and samples, threads per role, cache hits and
///   bytes per tier, read-ahead, skips by cause, peers. Loaders of one process share
///   an address, labelled `loader` and `rank`. Listens only there.
///
/// - `image_column`, `audio_column` (None), `label_column` (`"auto"`): where a Parquet
///   dataset (a `.parquet` file, a folder of them, or `s3://` of them, as Hugging Face
///   publishes datasets) keeps its samples and labels. Left out, the files' Hugging Face
///   features say (the `Image` or `Audio` feature, the `ClassLabel`), else columns named
///   `image` (`audio`) and `label`; the sample column is binary or the `{bytes, path}`
///   struct `datasets` writes; `label_column="none"` reads without labels.
/// - `read` (`"cached"`): `"cold"` reads every sample around the page cache (O_DIRECT
///   where the file system allows), so that storage is measured as it is, not as the
///   memory holding a recently read dataset; for benchmarks.
/// - `share` (None: off): `"auto"` reads through the node agent (started when none
///   runs: `python -m nostall.agent`), in the group of every job of this user on this
///   node that reads the same stream (dataset, pipeline, seed, batch size, ranks): each
///   batch is fetched and prepared once for all of them, and reaches each in shared
///   memory. A name (`share="search-17"`) makes a group of the jobs giving that name,
///   which must read the same stream (each rank of a job has a group of its own). A
///   job that comes mid-epoch reads that epoch with the agent's threads alone and joins
///   at the next; one that stops asking for batches for 2 s while the group waits for
///   it is detached and goes on alone. A shared batch may be changed in place: its pages
///   are copied as they are written, for this job alone. A thread of the loader's
///   receives the next batch and makes its tensors while the training step runs, so that
///   `next()` only takes them. `"off"` reads with this process's own threads.
///   `metrics["shared"]` has the group's `group` name, `members`, `lag_batches` (batches
///   the group had ready past this job's last), `batches_from_group` and
///   `batches_private` (this epoch), `group_batches_prepared`,
///   `group_batches_delivered`, `members_detached` and `bytes_saved` (prepared batch
///   bytes the group delivered beyond each batch's first: prep and fetch not repeated).
/// - `device` (None: CPU tensors): `"cuda"` (the device of `LOCAL_RANK` under torchrun,
///   else `cuda:0`) or `"cuda:N"`: batches are handed over as CUDA tensors, ready in the
///   consumer's current stream. The engine prepares 8-bit pixels into page-locked
///   buffers; each batch is copied on a side stream, converted to the pipeline's dtype
///   and normalised on the GPU (CHW images come channels-last in memory). Needs PyTorch
///   with CUDA. With `share=` the group's batches, which the node agent makes on the CPU
///   for every member, are copied to the device as they are (`decode="gpu"` is refused).
/// - `decode` (`"auto"`, with `device`): where JPEGs are decoded. `"auto"`: JPEGs of at
///   least `gpu_decode_min_pixels` (1 000 000) pixels go to the GPU's decoder (nvJPEG,
///   through torchvision; the hardware decoder where the GPU has one) as long as the
///   consumer would otherwise wait for CPU prep; smaller ones stay on the CPU, where
///   decoding only the crop at a reduced DCT scale costs less. `"gpu"`: every JPEG on
///   the GPU. `"cpu"`: none. The crop and flip are drawn by the engine whichever decodes
///   (same augmentation; pixels differ by the decoders' rounding). `metrics["device"]`
///   has `batches`, `decoded_on_device`, `page_locked`, `buffers_page_locked`,
///   `gpu_decode_share` and `gpu_decoded`.
/// - `worker_nice` (None: 0, or 10 with `device`): how far below the training thread's
///   the loader threads' CPU priority is (a Linux nice increment, 0 to 19), so that the
///   thread launching the GPU's work is not queued behind a decoder.
/// - `mix` (None): a `nostall.Mixup`: MixUp and CutMix of each batch in the engine, as
///   timm's `Mixup`; the labels are then soft, float32 `[batch, num_classes]`.
/// - `stack_views` (False): with a list of pipelines, consecutive views of one shape come
///   as one tensor `[views, batch, *shape]` (DINO's two global crops, its eight local
///   ones), a view of the batch's memory like each view alone.
/// - `batch_transform` (None): a function `fn(images, labels) -> (images, labels)` run
///   on each batch before it is handed over (with `device=`, on the device in the
///   stager's stream, after the conversion). A `generator` keyword, where `fn` takes
///   one, is a `torch.Generator` on the batch's device (a NumPy `Generator` for NumPy
///   batches) seeded by (seed, rank, epoch, batch): the same draws for any thread count
///   and after a resume. An exception in it reaches the loop; the batch counts as
///   delivered. With `fields=` it is `fn(batch) -> batch` on the dictionary.
/// - `fields` (None): each sample as a record of named fields, each batch a dictionary
///   of them: `{"image": "jpg;png", "caption": "txt", "meta": "json", "label": "cls",
///   "text": nostall.Field("txt", tokenizer=tok)}`. A field names the members (WebDataset
///   extensions, Parquet columns, a manifest's `audio`/`text`, a folder's sidecar files)
///   it is read from; its kind follows from the name or a `nostall.Field`: the pipeline's
///   tensor, the label, `list[str]`, tokens `(input_ids, attention_mask)`, JSON objects,
///   `list[bytes]`. A missing or bad field is the sample's error naming it
///   (`missing-field`, `bad-text`, `bad-json`).
/// - `weights` (None): with a list of `source`s, each one's weight: every epoch holds as
///   many samples as they do together, each its weight's share (None: by size); each
///   dataset is read in whole seeded passes. `metrics["sources"]` counts what each gave.
///
/// Images are `[batch, 3, height, width]` (or `[batch, height, width, 3]` for HWC)
/// float32 or uint8 sharing the loader's batch buffer (no copy; on the device with
/// `device=`); labels are `[batch]` int64. `len(loader)` is the number of batches per
/// epoch. Each `iter(loader)` runs the epoch set by `set_epoch`, or the position given to
/// `load_state_dict`, or else the epoch after the last one finished.
///
/// Raises `ConfigError` for impossible settings, `StorageError` when the source
/// cannot be read, `PeerError` when the nodes of a partitioned cache cannot reach or
/// refuse each other, and (while iterating) `SampleError` naming a bad sample.
#[pyclass(module = "nostall._nostall")]
pub(crate) struct Loader {
    inner: Arc<nostall::Loader>,
    output: Arc<Output>,
    dist: nostall::env::Distributed,
    /// Where the next `iter()` starts: the start of an epoch, or a checkpoint (from
    /// `load_state_dict`, or where an epoch stopped on an error).
    next: Position,
    resume: Option<nostall::Checkpoint>,
    /// The epoch being iterated (kept after it ends, for its metrics).
    current: Option<nostall::Epoch>,
    /// Whether `current` can still yield batches.
    active: bool,
    /// Catalog ids of the samples of the batch last returned.
    last_ids: Vec<u64>,
    /// This process's part in a partitioned cache (`cache_policy="partitioned"`).
    node: Option<live::NodeCounters>,
    /// The live metrics endpoint serving this loader (`metrics_addr`).
    endpoint: Option<nostall::metrics::export::Registration>,
    /// The node agent's group this loader reads from (`share=`).
    shared: Option<shared::Shared>,
    /// Where a shared epoch stands, while one is iterated.
    shared_at: Option<Position>,
    /// The CUDA device batches are moved to (`device=`).
    device: Option<device::Device>,
    /// The shapes of a sample's views, where the pipeline makes several (else empty).
    views: Vec<Vec<usize>>,
    /// Whether consecutive views of one shape come as one tensor (`stack_views=`).
    stack_views: bool,
    /// The user's function on each batch (`batch_transform=`), a `nostall._batch.BatchTransform`.
    batch_transform: Option<Py<PyAny>>,
    /// How batches of records become dictionaries (`fields=`).
    records: Option<Arc<Records>>,
    /// A Dataset object's samples (`Loader(dataset)`): how its batches are given back.
    user: Option<user::UserSamples>,
    /// The pipeline's `ops.Python`, and their worker processes when they run in some.
    python_ops: Option<Arc<PythonOps>>,
    /// What each dataset of a mixture delivered (`source=[...]`).
    sources: Option<SourceCounts>,
    /// How many epochs `iter()` started: an iterator of an earlier one is stale.
    generation: u64,
}

/// The batches of one `iter(loader)`: a fresh iterator per call, as the DataLoader's, so
/// `iter()` of the iterator itself (a `for` loop over it, `enumerate`, `islice`) goes on
/// where it stands instead of starting the epoch again.
#[pyclass(module = "nostall._nostall")]
pub(crate) struct Batches {
    loader: Py<Loader>,
    /// The loader's generation when this iterator's epoch started.
    generation: u64,
    /// Whether it ended: an iterator that stopped stays stopped.
    done: bool,
}

#[pymethods]
impl Batches {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// The next `(images, labels)` batch (a dictionary of fields with `fields=`); the GIL
    /// is released while waiting for it.
    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        if self.done {
            return Ok(None);
        }
        let mut loader = self.loader.bind(py).try_borrow_mut()?;
        if loader.generation != self.generation {
            return Err(PyRuntimeError::new_err(
                "this iterator's epoch was replaced by a later iter(loader), which stopped \
                 it: iterate the newest iterator",
            ));
        }
        let next = loader.next_batch(py)?;
        self.done = next.is_none();
        Ok(next)
    }
}

#[pymethods]
impl Loader {
    // `pipeline` is a string or a list, so its default is written out for Python in the
    // text signature (the generated one would show `...`).
    #[new]
    #[pyo3(
        signature = (
            source, *, batch_size=None, pipeline=None, image_size=None, dtype=None,
            layout=None, shuffle=None, seed=None, drop_last=None, shard=None, threads=None,
            fetch_threads=None, prefetch=None, overlap_epochs=None, cache=None,
            cache_policy=None, cache_epochs=None, cache_fill=None, memory=None,
            group_memory=None, on_error=None, quarantine=None, rank=None, world_size=None, output="auto",
            metrics_addr=None, balance_ranks=None, share=None, read=None, device=None,
            decode="auto", gpu_decode_min_pixels=DecodeRoute::DEFAULT_MIN_PIXELS,
            image_column=None, audio_column=None, label_column=None, worker_nice=None,
            mix=None, aug_repeats=None, batch_transform=None, stack_views=false, fields=None,
            weights=None, workers=None, worker_init_fn=None, timeout=None
        ),
        text_signature = "(source, *, batch_size=64, pipeline='train', image_size=None, \
            dtype='float32', layout='CHW', shuffle=True, seed=0, drop_last=False, shard='pad', \
            threads=None, fetch_threads=None, prefetch=None, overlap_epochs=True, \
            cache=None, cache_policy='minio', cache_epochs=None, \
            cache_fill='background', memory=None, group_memory=None, on_error='error', quarantine=None, rank=None, world_size=None, output='auto', \
            metrics_addr=None, balance_ranks=None, share=None, read='cached', device=None, \
            decode='auto', gpu_decode_min_pixels=1000000, image_column=None, \
            audio_column=None, label_column='auto', worker_nice=None, mix=None, aug_repeats=1, \
            batch_transform=None, stack_views=False, fields=None, weights=None, workers=None, \
            worker_init_fn=None, timeout=None)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        source: SourceArg,
        batch_size: Option<usize>,
        pipeline: Option<Bound<'_, PyAny>>,
        image_size: Option<u32>,
        dtype: Option<Text<DType>>,
        layout: Option<Text<Layout>>,
        shuffle: Option<bool>,
        seed: Option<u64>,
        drop_last: Option<bool>,
        shard: Option<Text<Shard>>,
        threads: Option<ThreadsArg>,
        fetch_threads: Option<usize>,
        prefetch: Option<usize>,
        overlap_epochs: Option<bool>,
        cache: Option<CacheSize>,
        cache_policy: Option<CacheChoice>,
        cache_epochs: Option<u64>,
        cache_fill: Option<Text<CacheFill>>,
        memory: Option<Bytes>,
        group_memory: Option<Bytes>,
        on_error: Option<Text<ErrorPolicy>>,
        quarantine: Option<PathBuf>,
        rank: Option<usize>,
        world_size: Option<usize>,
        output: &str,
        metrics_addr: Option<String>,
        balance_ranks: Option<bool>,
        share: Option<Text<Share>>,
        read: Option<Text<ReadMode>>,
        device: Option<&str>,
        decode: &str,
        gpu_decode_min_pixels: u64,
        image_column: Option<String>,
        audio_column: Option<String>,
        label_column: Option<Text<LabelColumn>>,
        worker_nice: Option<u8>,
        mix: Option<PyRef<'_, Mixup>>,
        aug_repeats: Option<u32>,
        batch_transform: Option<Bound<'_, PyAny>>,
        stack_views: bool,
        fields: Option<FieldsArg>,
        weights: Option<Vec<f64>>,
        workers: Option<user::Mode>,
        worker_init_fn: Option<Py<PyAny>>,
        timeout: Option<f64>,
    ) -> PyResult<Loader> {
        if matches!(&source, SourceArg::Many(many) if many.is_empty()) {
            return Err(config_error(
                py,
                "source=[]: give a dataset's location, or a list of them to mix".into(),
            ));
        }
        let python_ops = PythonOps::new(output != "numpy" && py.import("torch").is_ok());
        let pipeline = pipeline
            .map(|p| PipelineArg::with_python(&p, &python_ops))
            .transpose()?;
        if let (Some(given), Some(PipelineArg(_, Some(recipe)))) = (&dtype, &pipeline) {
            if given.0 != *recipe {
                return Err(config_error(
                    py,
                    format!(
                        "dtype=\"{}\" with a recipe that delivers {recipe}: torchvision would \
                         give {recipe}; leave dtype= out, or change the recipe's conversions",
                        given.0
                    ),
                ));
            }
        }
        let held = match &source {
            SourceArg::Dataset(dataset) => {
                let label = label_column.as_ref().map(|l| &l.0);
                arrow::held_dataset(
                    py,
                    dataset.bind(py),
                    image_column.as_deref(),
                    label.unwrap_or(&LabelColumn::Auto),
                )?
            }
            _ => None,
        };
        let (image_column, label_column) = match held {
            Some(_) => (None, None),
            None => (image_column, label_column),
        };
        let user_dataset = match &source {
            SourceArg::Dataset(_) if held.is_some() => None,
            SourceArg::Dataset(dataset) => {
                let refused = [
                    (pipeline.is_some(), "pipeline= (its transform is its own)"),
                    (image_size.is_some(), "image_size="),
                    (fields.is_some(), "fields="),
                    (share.is_some(), "share="),
                    (mix.is_some(), "mix="),
                    (device.is_some(), "device="),
                    (batch_transform.is_some(), "batch_transform="),
                    (dtype.is_some() || layout.is_some(), "dtype= or layout="),
                ];
                if let Some((_, what)) = refused.iter().find(|(given, _)| *given) {
                    return Err(config_error(
                        py,
                        format!("a Dataset object with {what} is not supported: its samples are what its __getitem__ returns"),
                    ));
                }
                Some(dataset.clone_ref(py))
            }
            _ => None,
        };
        if let Some(t) = timeout.filter(|t| !(t.is_finite() && *t > 0.0 && *t <= MAX_TIMEOUT)) {
            return Err(config_error(
                py,
                format!("timeout={t}: give seconds above 0, at most {MAX_TIMEOUT} (a week)"),
            ));
        }
        let user_code = user_dataset.is_some() || !python_ops.is_empty();
        if !user_code && (workers.is_some() || timeout.is_some())
            || user_dataset.is_none() && worker_init_fn.is_some()
        {
            return Err(config_error(
                py,
                "workers= and timeout= run a Dataset object's __getitem__ or ops.Python, and \
                 worker_init_fn= a Dataset's workers: give source= a Dataset (or ops.Python in \
                 pipeline=)"
                    .into(),
            ));
        }
        let mixture: Vec<(String, Option<f64>)> = match (&source, weights) {
            (SourceArg::Dataset(_), Some(_)) => {
                return Err(config_error(
                    py,
                    "weights= mixes several datasets' locations, not Dataset objects".into(),
                ))
            }
            (SourceArg::One(_) | SourceArg::Dataset(_), None) => Vec::new(),
            (SourceArg::One(_), Some(_)) => {
                return Err(config_error(
                    py,
                    "weights= mixes several datasets: give source= a list of them".into(),
                ))
            }
            (SourceArg::Many(many), None) => many.iter().map(|l| (l.clone(), None)).collect(),
            (SourceArg::Many(many), Some(weights)) if weights.len() == many.len() => many
                .iter()
                .cloned()
                .zip(weights.into_iter().map(Some))
                .collect(),
            (SourceArg::Many(many), Some(weights)) => {
                return Err(config_error(
                    py,
                    format!(
                        "{} datasets and {} weights: give one weight each",
                        many.len(),
                        weights.len()
                    ),
                ))
            }
        };
        // A mixture's epoch may hold a sample twice, each with its own crop: decoded on
        // the CPU, unless a device decode was asked for (which the engine refuses).
        let decode = match (mixture.is_empty(), decode) {
            (false, "auto") => "cpu",
            (_, decode) => decode,
        };
        let location = match &source {
            SourceArg::One(location) => location.clone(),
            SourceArg::Many(many) => many.join(" + "),
            SourceArg::Dataset(dataset) => dataset.bind(py).get_type().name()?.to_string(),
        };
        if fields.is_some() && output == "dlpack" {
            return Err(config_error(
                py,
                "fields= with output=\"dlpack\" is not supported yet".into(),
            ));
        }
        let batch_transform = batch_transform
            .map(|f| -> PyResult<Py<PyAny>> {
                Ok(py
                    .import("nostall._batch")?
                    .getattr("BatchTransform")?
                    .call1((f,))?
                    .unbind())
            })
            .transpose()?;
        if image_column.is_some() && audio_column.is_some() {
            return Err(config_error(
                py,
                "image_column= and audio_column= both name the column of samples: give one".into(),
            ));
        }
        let share = share.map_or(Share::Off, |s| s.0);
        let sharing = share != Share::Off;
        if sharing && aug_repeats.is_some_and(|k| k > 1) {
            return Err(config_error(
                py,
                "aug_repeats= with share=: the node agent's batches hold each sample once".into(),
            ));
        }
        let args = ConfigArgs {
            batch_size,
            pipeline,
            image_size,
            dtype,
            layout,
            shuffle,
            seed,
            drop_last,
            shard,
            aug_repeats,
            threads,
            balance_ranks,
            fetch_threads,
            prefetch,
            // Not for a job that shares: its loader's settings are the group's.
            worker_nice: worker_nice.or(device.filter(|_| !sharing).map(|_| device::WORKER_NICE)),
            overlap_epochs,
            cache,
            cache_policy,
            cache_epochs,
            cache_fill,
            memory,
            group_memory,
            on_error,
            quarantine,
            read,
            rank,
            world_size,
            sample_column: image_column.or(audio_column),
            label_column,
        };
        let (mut builder, mut dist) = args.builder(py, location)?;
        if !mixture.is_empty() {
            builder.mixture(mixture.clone());
        }
        // Worker processes for the user's code: one per prep thread asked for, else a core.
        let worker_count = match builder.settings().threads {
            nostall::pipeline::Threads::Count(n) => n,
            _ => nostall::pipeline::usable_cores(),
        };
        let mut user = None;
        if let Some(dataset) = &user_dataset {
            let args = user::UserArgs {
                mode: workers.unwrap_or(user::Mode::Auto),
                workers: worker_count,
                timeout,
                worker_init_fn,
                seed: builder.settings().plan.seed,
            };
            let (pipeline, opened, samples) = user::UserSamples::new(py, dataset.bind(py), args)?;
            builder.pipeline(pipeline);
            user = Some((opened, samples));
        }
        let python_ops = match python_ops.is_empty() {
            true => None,
            false => Some(python_ops),
        };
        if let Some(python) = &python_ops {
            let config = builder.config().map_err(|e| raise(py, e))?;
            let image = config.pipeline.modality() == nostall::Modality::Image;
            // Threads unless asked: a function given arrays spends its time in NumPy's
            // and torch's kernels, which release the GIL, and measured faster in the
            // threads than through worker processes (docs/benchmarks.md).
            let processes = workers == Some(user::Mode::Processes);
            if timeout.is_some() && !processes {
                return Err(config_error(
                    py,
                    "timeout= bounds ops.Python in worker processes (workers=\"processes\"); \
                     in the loader's threads a call is not bounded"
                        .into(),
                ));
            }
            if processes && !image {
                return Err(config_error(
                    py,
                    "ops.Python in worker processes takes images; an audio pipeline's run in \
                     the loader's threads (workers=\"threads\")"
                        .into(),
                ));
            }
            if processes {
                let timeout =
                    timeout.map_or(user::DEFAULT_TIMEOUT, std::time::Duration::from_secs_f64);
                let bytes = config.pipeline.layout().bytes();
                python.start_workers(py, worker_count, bytes, timeout)?;
            }
        }
        let mut job = JobBuilder::new(builder);
        let user = user.map(|(opened, samples)| {
            job.dataset(opened);
            samples
        });
        if let Some(held) = held {
            job.dataset(held);
        }
        let shapes = fields.as_ref().map(FieldsArg::shapes).unwrap_or_default();
        if let Some(fields) = fields {
            let modality = job
                .loader()
                .config()
                .map_err(|e| raise(py, e))?
                .pipeline
                .modality();
            let fields = fields.fields(py, modality)?;
            if fields.samples() > 1 && (device.is_some() || mix.is_some()) {
                return Err(config_error(
                    py,
                    "fields= with two fields of the pipeline's modality and device= or mix= is \
                     not supported yet: the device finishes and mix= mixes one image a sample"
                        .into(),
                ));
            }
            job.loader_mut().fields(Some(fields));
        }
        if let Some(mix) = mix {
            if sharing {
                return Err(config_error(
                    py,
                    "mix= with share=: the node agent's batches are the group's, not mixed \
                     per job"
                        .into(),
                ));
            }
            job.loader_mut().mix(Some(mix.0.clone()));
        }
        if let Some(capacity) = args.node_capacity(py)? {
            let mut node = NodeConfig::from_env(capacity).map_err(|e| raise_peer(py, e))?;
            node.seed = job.loader().settings().plan.seed;
            job.on_node(node);
        }
        let output = Arc::new(resolve_output(py, output)?);
        let device = match device {
            None => None,
            Some(_) if !matches!(*output, Output::Torch(_)) => {
                return Err(config_error(
                    py,
                    "device= hands over torch tensors: use output=\"torch\" (or \"auto\" with \
                     torch installed)"
                        .into(),
                ))
            }
            // The group's batches are the node agent's, made on the CPU for every member:
            // moved as they are.
            Some(device) if sharing => Some(device::Device::moving_shared(py, device, decode)?),
            Some(device) => Some(device::Device::attach(
                py,
                device,
                decode,
                gpu_decode_min_pixels,
                job.loader_mut(),
            )?),
        };
        if sharing {
            job.share(share)
                .start_agent_with(shared::agent_starter(py)?);
        }
        let job = interruptible(py, move || job.start())?.map_err(|e| job_error(py, e))?;
        (dist.rank, dist.world) = (job.rank, job.world);
        let goes_alone = job.goes_alone();
        let layout = job.loader.config().pipeline.layout().clone();
        let records = match layout.parts().is_empty() {
            true => None,
            false => Some(Arc::new(Records::new(
                py,
                &layout,
                job.loader.catalog().clone(),
                shapes,
            )?)),
        };
        let shared = job.agent.map(|client| {
            let make = match &records {
                Some(records) => records.shared_make(output.clone()),
                None => shared_objects(output.clone(), layout),
            };
            shared::Shared::new(client, make, goes_alone)
        });
        let node = match job.node {
            Some(node) => Some(live::NodeCounters::Joined(Arc::new(node))),
            None => shared
                .as_ref()
                .and_then(|s| s.node.clone())
                .map(live::NodeCounters::Agent),
        };
        let inner = Arc::new(job.loader);
        {
            let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
            live.retain(|loader| loader.strong_count() > 0);
            live.push(Arc::downgrade(&inner));
        }
        let sources = inner.config().plan.mixture.clone().map(|m| {
            let locations = mixture.into_iter().map(|(location, _)| location).collect();
            SourceCounts::new(locations, m)
        });
        let views = inner.config().pipeline.layout().views().to_vec();
        if stack_views && views.is_empty() {
            return Err(config_error(
                py,
                "stack_views=True stacks several views of a sample: give pipeline= a list of \
                 pipelines"
                    .into(),
            ));
        }
        if !views.is_empty() {
            if sharing {
                return Err(config_error(
                    py,
                    "views with share=: the node agent's batches carry one image a sample".into(),
                ));
            }
            if matches!(*output, Output::DLPack) {
                return Err(config_error(
                    py,
                    "views are handed over as one torch tensor or NumPy array a view: use \
                     output=\"torch\" or \"numpy\""
                        .into(),
                ));
            }
        }
        let endpoint = nostall::env::metrics_addr(metrics_addr.as_deref())
            .map(|addr| {
                let figures = live::LoaderFigures {
                    loader: inner.clone(),
                    node: node.clone(),
                    group: shared.as_ref().map(|s| s.last.clone()),
                };
                nostall::metrics::export::serve(&addr, Arc::new(figures), dist.rank)
            })
            .transpose()
            .map_err(|e| raise(py, e))?;
        if shared.is_none() {
            // Epoch 0 is prepared while the script makes its model (see
            // `nostall::Loader::prepare`); another first epoch discards it.
            inner
                .prepare(Position::start_of(0))
                .map_err(|e| raise(py, e))?;
        }
        Ok(Loader {
            inner,
            endpoint,
            output,
            dist,
            next: Position::start_of(0),
            resume: None,
            current: None,
            active: false,
            last_ids: Vec::new(),
            node,
            shared,
            shared_at: None,
            device,
            views,
            stack_views,
            batch_transform,
            records,
            sources,
            user,
            python_ops,
            generation: 0,
        })
    }

    /// Batches per epoch on this rank (when no sample is skipped).
    fn __len__(&self) -> usize {
        match &self.shared {
            Some(shared) => shared.batches_per_epoch(),
            None => self.inner.batches_per_epoch(),
        }
    }

    /// Starts an epoch and returns its batches: the epoch set by `set_epoch`, the position
    /// given to `load_state_dict` (consumed by the first epoch started after it), or the
    /// epoch after the last one iterated to its end. Each call makes a fresh iterator, as
    /// the DataLoader's do; a later call starts its epoch again from the start (or from
    /// where an error stopped it), and an earlier iterator of this loader then raises.
    fn __iter__(slf: Bound<'_, Self>) -> PyResult<Batches> {
        let generation = slf.borrow_mut().start_epoch(slf.py())?;
        Ok(Batches {
            loader: slf.unbind(),
            generation,
            done: false,
        })
    }

    /// Makes the next iteration run epoch `epoch` from its start (its shuffle order
    /// follows from the seed and the epoch).
    fn set_epoch(&mut self, epoch: u64) {
        self.next = Position::start_of(epoch);
        self.resume = None;
    }

    /// The epoch the next iteration runs, or the one being iterated.
    #[getter]
    fn epoch(&self) -> u64 {
        self.position().epoch
    }

    /// Where the loader stands: `{"epoch", "batch", "sample", "rank", "identity",
    /// "skipped", "history"}`. Saved with a checkpoint and given to `load_state_dict`, it
    /// resumes exactly after the last batch delivered; `identity` ties it to the dataset
    /// and settings it was saved with, `skipped` carries the epoch's skip counts by cause,
    /// `history` the epoch's stretches under other world sizes.
    fn state_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let checkpoint = match (&self.current, self.active, &self.resume) {
            (Some(epoch), true, _) => py.detach(|| self.inner.checkpoint(epoch)),
            (_, _, Some(checkpoint)) => checkpoint.clone(),
            _ => nostall::Checkpoint {
                position: self.position(),
                identity: py.detach(|| self.inner.identity()),
                skipped: Default::default(),
                rank: self.dist.rank as u64,
                history: Vec::new(),
            },
        };
        state::to_dict(py, &checkpoint)
    }

    /// Makes the next iteration resume from `state_dict()`s: one rank's, or a list of
    /// every rank's. With the world size they were saved with, each rank resumes its own
    /// position (or the first given); with another, the rest of the epoch is re-sharded
    /// over this job's ranks, each sample once, with the augmentation it would have had
    /// (one rank's state is enough unless a rank skipped samples in the epoch). Checked
    /// here: `ConfigError` naming what differs or what is missing.
    fn load_state_dict(&mut self, py: Python<'_>, state: &Bound<'_, PyAny>) -> PyResult<()> {
        let states = state::from_python(py, state)?;
        let inner = self.inner.clone();
        let resumed = py
            .detach(move || inner.resolve(&states))
            .map_err(|e| raise(py, e))?;
        self.next = resumed.position;
        // Prepared from there at once, unless skips of the epoch so far go on from the
        // saved counts, or it goes on in an order this loader's settings would not deal
        // (the epoch is then started when iterated).
        if self.shared.is_none()
            && resumed.skipped.is_empty()
            && resumed.history.is_empty()
            && resumed.identity == self.inner.identity()
        {
            let (inner, at) = (self.inner.clone(), resumed.position);
            py.detach(move || inner.prepare(at))
                .map_err(|e| raise(py, e))?;
        }
        self.resume = Some(resumed);
        Ok(())
    }

    /// This process's rank (from the argument, else `RANK`, else 0).
    #[getter]
    fn rank(&self) -> usize {
        self.dist.rank
    }

    /// The number of ranks (from the argument, else `WORLD_SIZE`, else 1).
    #[getter]
    fn world_size(&self) -> usize {
        self.dist.world
    }

    /// Where live metrics are served (`host:port`, the port chosen when `:0` was given),
    /// or None.
    #[getter]
    fn metrics_addr(&self) -> Option<String> {
        self.endpoint.as_ref().map(|e| e.local_addr().to_string())
    }

    /// The rank within this node (`LOCAL_RANK`, else the rank).
    #[getter]
    fn local_rank(&self) -> usize {
        self.dist.local_rank
    }

    /// Samples in the whole dataset (all ranks).
    #[getter]
    fn dataset_len(&self) -> usize {
        self.inner.catalog().len()
    }

    /// The dataset's catalog ids of the samples of the batch last returned, in batch
    /// order (which samples a rank saw; ids index the whole dataset, all ranks).
    #[getter]
    fn last_ids(&self) -> Vec<u64> {
        self.last_ids.clone()
    }

    /// Class names, in label order (empty for a flat folder).
    #[getter]
    fn classes(&self) -> Vec<String> {
        self.inner.catalog().classes().to_vec()
    }

    /// Batch buffers allocated since the loader was made: bounded by the prefetch depth
    /// (twice while epochs overlap) plus the batches Python holds, whatever the number of
    /// epochs.
    #[getter]
    fn buffers_allocated(&self) -> usize {
        self.inner.buffers_allocated()
    }

    /// How `memory=` was split, in bytes: `{"budget", "batch_buffers", "readahead",
    /// "groups", "cache", "prefetch"}`; None without a budget.
    #[getter]
    fn memory_plan<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(plan) = self.inner.memory_plan() else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("budget", plan.budget)?;
        d.set_item("batch_buffers", plan.batch_buffers)?;
        d.set_item("readahead", plan.readahead)?;
        d.set_item("groups", plan.groups)?;
        d.set_item("cache", plan.cache)?;
        d.set_item("prefetch", plan.prefetch)?;
        Ok(Some(d))
    }

    /// The current (or last) epoch's figures as a dict: see the package docs.
    #[getter]
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        // A shared epoch's figures are the job's side of it: batches, samples, waits.
        let stats = match (&self.current, &self.shared) {
            (Some(epoch), _) => py.detach(|| epoch.stats()),
            (None, Some(shared)) => shared.epoch.clone(),
            (None, None) => EpochStats::default(),
        };
        let d = stats_dict(py, &stats)?;
        d.set_item("buffers_allocated", self.inner.buffers_allocated())?;
        if let Some(user) = &self.user {
            d.set_item("workers", user.metrics(py)?)?;
        }
        if let Some(workers) = self.python_ops.as_ref().and_then(|p| p.workers()) {
            d.set_item("workers", workers.metrics(py, "workers=\"processes\"")?)?;
        }
        if let Some(shared) = &self.shared {
            let (group, members) = shared.group();
            let g = PyDict::new(py);
            g.set_item("group", group)?;
            g.set_item("members_at_attach", members)?;
            g.set_item("batches_from_group", shared.from_group)?;
            g.set_item("batches_private", shared.private)?;
            if let Some((group, batch_bytes)) = shared.last() {
                g.set_item("members", group.members)?;
                g.set_item("lag_batches", group.ahead)?;
                g.set_item("group_batches_prepared", group.produced)?;
                g.set_item("group_batches_delivered", group.delivered)?;
                g.set_item("members_detached", group.detached)?;
                g.set_item("bytes_saved", shared::bytes_saved(&group, batch_bytes))?;
            }
            d.set_item("shared", g)?;
        }
        if let Some(node) = &self.node {
            d.set_item("partitioned", node_dict(py, &node.stats())?)?;
        }
        if let Some(device) = &self.device {
            d.set_item("device", device.metrics(py)?)?;
        }
        if let Some(sources) = &self.sources {
            d.set_item("sources", sources.list(py)?)?;
        }
        Ok(d)
    }

    /// The samples skipped so far in the current (or last) epoch under
    /// `on_error="skip"` (the first 1 000): dicts with `sample_id`, `location`, `cause`
    /// and `detail`.
    fn skipped<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        if let Some(epoch) = &self.current {
            for e in py.detach(|| epoch.skipped()) {
                let d = PyDict::new(py);
                d.set_item("sample_id", e.id)?;
                d.set_item("location", &e.location)?;
                d.set_item("cause", e.cause.kind())?;
                d.set_item("detail", e.cause.to_string())?;
                list.append(d)?;
            }
        }
        Ok(list)
    }

    fn __repr__(&self) -> String {
        let c = self.inner.config();
        let prepared_by = match &self.shared {
            Some(shared) => format!("shared in the node agent's group {}", shared.group().0),
            None => format!("{} prep threads", c.prep_threads),
        };
        format!(
            "Loader({} samples, batch_size={}, rank {} of {}, {prepared_by}, {} batches per epoch)",
            self.inner.catalog().len(),
            c.plan.batch_size,
            self.dist.rank,
            self.dist.world,
            self.inner.batches_per_epoch()
        )
    }
}

/// The longest `timeout=` taken, in seconds.
const MAX_TIMEOUT: f64 = 7.0 * 24.0 * 3600.0;

/// Every loader made, while it lasts ([`halt_at_exit`]).
static LIVE: Mutex<Vec<Weak<nostall::Loader>>> = Mutex::new(Vec::new());

/// `atexit`: halts every loader's epochs and waits (boundedly) for their threads, with the
/// GIL released, before the interpreter finalises: a loader kept to the end (a module's
/// global) would otherwise have prep threads inside the user's code (a `Dataset`,
/// `ops.Python`, torch) while the process tears the interpreter and its libraries down.
#[pyfunction]
pub(crate) fn halt_at_exit(py: Python<'_>) {
    let live: Vec<Arc<nostall::Loader>> = LIVE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .drain(..)
        .filter_map(|loader| loader.upgrade())
        .collect();
    py.detach(|| live.iter().for_each(|loader| loader.halt()));
}

impl Drop for Loader {
    fn drop(&mut self) {
        // Stopping an epoch waits (boundedly) for its threads: not with the GIL held (a
        // Dataset's threads may wait for it), nor the epoch started ahead.
        let epoch = self.current.take();
        let inner = &self.inner;
        Python::attach(|py| {
            py.detach(move || {
                drop(epoch);
                inner.stop_ahead();
            })
        });
    }
}

/// `(images, labels)` as one Python tuple.
fn pair(py: Python<'_>, (images, labels): (Py<PyAny>, Py<PyAny>)) -> PyResult<Py<PyAny>> {
    Ok(PyTuple::new(py, [images, labels])?.into_any().unbind())
}

impl Loader {
    /// Starts the epoch `__iter__` runs, and returns its generation: the saved state
    /// (`load_state_dict`, an error's) is consumed here, so a later `iter()` starts the
    /// epoch again from its start in this loader's own order, never from a bare position
    /// of an order it does not deal.
    fn start_epoch(&mut self, py: Python<'_>) -> PyResult<u64> {
        self.generation += 1;
        let previous = self.current.take();
        let resume = self.resume.take();
        let at = resume.as_ref().map_or(self.next, |c| c.position);
        self.next = Position::start_of(at.epoch);
        if let Some(sources) = &mut self.sources {
            sources.restart();
        }
        // The group serves positions of this loader's order: a state of a stretch under
        // another world size, or of an epoch dealt in other groups, resumes on its threads.
        let resumes_its_own = resume.as_ref().is_some_and(|c| {
            let own = self.inner.identity();
            !c.history.is_empty()
                || (c.identity.open_groups, c.identity.groups) != (own.open_groups, own.groups)
        });
        if let Some(shared) = self.shared.as_mut().filter(|_| !resumes_its_own) {
            // The group serves positions; skip counts of a resumed state stay the
            // group's concern.
            py.detach(move || drop(previous));
            shared.begin(at.epoch);
            self.shared_at = Some(at);
            self.active = true;
            return Ok(self.generation);
        }
        self.shared_at = None;
        let inner = self.inner.clone();
        let epoch = py
            .detach(move || {
                drop(previous); // stops and joins its threads
                match resume {
                    Some(checkpoint) => inner.resume_saved(&checkpoint),
                    None => inner.resume(at),
                }
            })
            .map_err(|e| raise(py, e))?;
        self.current = Some(epoch);
        self.active = true;
        Ok(self.generation)
    }

    /// The next batch of the epoch `__iter__` started, for its [`Batches`]; the GIL is
    /// released while waiting for it.
    fn next_batch(&mut self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        if !self.active {
            return Ok(None);
        }
        if let Some(at) = self.shared_at {
            match self.next_shared(py, at)? {
                Some(Some(objects)) => {
                    let after = self.shared_at.unwrap_or(at);
                    if let Some(sources) = &mut self.sources {
                        sources.count(&self.last_ids);
                    }
                    if let Some(records) = &self.records {
                        let transform = self.record_transform(after);
                        return records
                            .shared_split(py, objects, self.device.as_ref(), transform)
                            .map(Some);
                    }
                    let objects = self.hand_over(py, objects, PyList::empty(py), after)?;
                    return Ok(Some(pair(py, objects)?));
                }
                Some(None) => return Ok(None),
                None => {} // the agent is gone: this loader's own threads go on from `at`
            }
        }
        let Some(epoch) = self.current.as_mut() else {
            return Ok(None);
        };
        // Wait in slices, checking for signals between them: Ctrl-C must interrupt a
        // wait for a batch that storage holds up.
        let next = loop {
            match py.detach(|| epoch.next_within(SIGNAL_CHECK)) {
                Next::Pending => py.check_signals()?,
                Next::Batch(batch) => break Some(batch),
                Next::End => break None,
            }
        };
        match next {
            None => {
                self.active = false;
                self.next = Position::start_of(nostall::Epoch::position(epoch).epoch + 1);
                self.resume = None;
                Ok(None)
            }
            Some(Err(e)) => {
                // A later state_dict() must point after the batches already delivered,
                // not at where this iteration started.
                self.next = nostall::Epoch::position(epoch);
                self.resume = Some(self.inner.checkpoint(epoch));
                self.active = false;
                Err(raise(py, e))
            }
            Some(Ok(batch)) => {
                let after = nostall::Epoch::position(epoch);
                self.last_ids.clear();
                self.last_ids.extend_from_slice(batch.ids());
                if let Some(sources) = &mut self.sources {
                    sources.count(batch.ids());
                }
                let labels = match batch.soft_labels() {
                    Some(soft) => {
                        let classes = soft.len() / batch.len().max(1);
                        Owner::SoftLabels(soft.to_vec(), classes)
                    }
                    None => Owner::Labels(batch.labels().to_vec()),
                };
                if let Some(records) = &self.records {
                    let transform = self.record_transform(after);
                    return records
                        .objects(
                            py,
                            &self.output,
                            batch,
                            labels,
                            self.device.as_ref(),
                            transform,
                        )
                        .map(Some);
                }
                let deferred = match &self.device {
                    Some(_) => device::Device::deferred(py, &batch, self.inner.catalog())?,
                    None => PyList::empty(py),
                };
                let n = batch.len();
                let (images, labels) = objects(py, &self.output, Owner::Batch(batch), labels)?;
                if let Some(user) = &self.user {
                    return user.batch(py, images, n).map(Some);
                }
                let images = split_views(py, images, &self.views, self.stack_views)?;
                let objects = self.hand_over(py, (images, labels), deferred, after)?;
                Ok(Some(pair(py, objects)?))
            }
        }
    }

    /// A batch's objects handed over: through the device's stager, with the batch
    /// transform in its stream, or the transform (if any) here. `after` is the position
    /// after the batch, whose seed the transform's generator takes.
    fn hand_over(
        &self,
        py: Python<'_>,
        objects: (Py<PyAny>, Py<PyAny>),
        deferred: Bound<'_, PyList>,
        after: Position,
    ) -> PyResult<(Py<PyAny>, Py<PyAny>)> {
        let transform = match &self.batch_transform {
            Some(t) => Some(
                t.bind(py)
                    .call_method1("bound", (self.transform_seed(after),))?,
            ),
            None => None,
        };
        match (&self.device, transform) {
            (Some(device), transform) => device.stage(py, objects, deferred, transform),
            (None, Some(transform)) => transform.call1(objects)?.extract(),
            (None, None) => Ok(objects),
        }
    }

    /// The batch transform with its seed for the batch before `after`, for records.
    fn record_transform(&self, after: Position) -> Option<(&Py<PyAny>, u64)> {
        self.batch_transform
            .as_ref()
            .map(|t| (t, self.transform_seed(after)))
    }

    /// The seed of the batch transform's generator for the batch before `after`: (seed,
    /// rank, epoch, batch).
    fn transform_seed(&self, after: Position) -> u64 {
        nostall::rng::derive(&[
            self.inner.config().plan.seed,
            self.dist.rank as u64,
            after.epoch,
            after.batch.saturating_sub(1),
            0x4241_5443,
        ])
    }

    /// The shared batch at `at`: `Some(Some(..))` a batch's objects, `Some(None)` the
    /// epoch's end, `None` when the agent is lost (this loader's own epoch then starts at
    /// `at`).
    #[allow(clippy::type_complexity)]
    fn next_shared(
        &mut self,
        py: Python<'_>,
        at: Position,
    ) -> PyResult<Option<Option<(Py<PyAny>, Py<PyAny>)>>> {
        let shared = self.shared.as_mut().expect("a shared epoch has a group");
        let goes_alone = shared.goes_alone();
        match shared.next(py, at, &self.inner) {
            Ok(Some(batch)) => {
                self.shared_at = Some(batch.position);
                self.last_ids = batch.ids;
                batch.objects.map(Some).map(Some)
            }
            Ok(None) => {
                self.active = false;
                self.shared_at = None;
                self.next = Position::start_of(at.epoch + 1);
                Ok(Some(None))
            }
            Err(shared::Failure::Refused(err)) => {
                self.stop_shared_at(at);
                Err(err)
            }
            Err(shared::Failure::Interrupted(err)) => {
                // Iterating again goes on from `at`, where the hand-off thread is.
                self.stop_shared_at(at);
                Err(err)
            }
            Err(shared::Failure::Lost(why)) if !goes_alone => {
                self.stop_shared_at(at);
                Err(shared::agent_error(
                    py,
                    nostall_agent::AgentError::Refused(format!(
                        "the node agent is lost ({why}): it ran this rank's node of the \
                         partitioned cache, so this loader cannot go on without it; restart \
                         the job (resuming from a state_dict)"
                    )),
                ))
            }
            Err(shared::Failure::Lost(why)) => {
                eprintln!(
                    "nostall: the node agent is lost ({why}); this loader goes on with \
                     threads of its own from epoch {} batch {}",
                    at.epoch, at.batch
                );
                self.shared = None;
                self.shared_at = None;
                let inner = self.inner.clone();
                let epoch = py
                    .detach(move || inner.resume(at))
                    .map_err(|e| raise(py, e))?;
                self.current = Some(epoch);
                Ok(None)
            }
        }
    }

    /// The shared epoch stopped at `at` (a failure): iterating again starts there.
    fn stop_shared_at(&mut self, at: Position) {
        self.active = false;
        self.shared_at = None;
        self.next = at;
    }

    fn position(&self) -> Position {
        if let (Some(at), true) = (self.shared_at, self.active) {
            return at;
        }
        match (&self.current, self.active, &self.resume) {
            (Some(epoch), true, _) => nostall::Epoch::position(epoch),
            (_, _, Some(checkpoint)) => checkpoint.position,
            _ => self.next,
        }
    }
}
