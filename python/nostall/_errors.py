"""The exceptions nostall raises; the extension module builds them from engine errors."""

from __future__ import annotations


class NostallError(Exception):
    """Base class of every error nostall raises."""


class ConfigError(NostallError, ValueError):
    """The loader's configuration cannot work; the message says what to change."""


class StorageError(NostallError, OSError):
    """The dataset, its index or its storage service could not be read or written.

    Attributes:
        location: the path or URL involved (``None`` when unknown); also ``filename``.
        errno: the operating system's error number, when there is one.
    """

    def __init__(self, message: str, *, location: str | None = None, errno: int | None = None):
        super().__init__(message)
        self.location = location
        self.filename = location
        self.errno = errno

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class PeerError(NostallError, ConnectionError):
    """A node of a partitioned cache could not join its job: a peer could not be reached
    in time, or refused (another secret, another dataset or placement). Once the loader
    runs, a failing peer is no error: its samples come from storage."""


class AgentError(NostallError, ConnectionError):
    """The node agent (``share=``) could not be started or reached, or refused the job:
    another user's socket directory, another nostall version, a named group reading
    another stream. Once a loader runs, a lost agent is no error: the loader goes on with
    threads of its own from where it stood."""


class SampleError(NostallError):
    """One sample could not be read or decoded, under ``on_error="error"``.

    Attributes:
        sample_id: the sample's index in the dataset's catalog.
        location: where the sample's bytes live (its path, or shard and member).
        cause: a short stable name of what went wrong: ``"missing"``,
            ``"permission-denied"``, ``"io"``, ``"empty"``, ``"too-large"``,
            ``"unknown-format"``, ``"too-many-pixels"`` or ``"corrupt"``.
        detail: the cause in words (e.g. the decoder's message).

    With ``on_error="skip"`` such samples are left out and counted by cause instead
    (``Loader.metrics["skipped"]``, ``Loader.skipped()``).
    """

    def __init__(self, message: str, *, sample_id: int, location: str, cause: str, detail: str):
        super().__init__(message)
        self.sample_id = sample_id
        self.location = location
        self.cause = cause
        self.detail = detail


class StepError(NostallError, RuntimeError):
    """The training step given to :func:`nostall.time_model` or :func:`nostall.analyze`
    raised while being timed on a synthetic batch.

    The message names the batch the step was called with; the step's own exception is
    the ``__cause__``.
    """
