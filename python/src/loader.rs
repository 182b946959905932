//! `nostall.Loader`: its arguments converted ([`crate::convert`]) into the engine's
//! settings, batches from its own threads or the node agent's group ([`crate::shared`]),
//! its state and figures.

use std::sync::{Arc, Mutex, Weak};

use nostall::loader::{LoaderBuilder, Next};
use nostall::sample::PartForm;
use nostall::{EpochStats, Position};
use nostall_agent::{JobBuilder, Share};
use nostall_peer::NodeConfig;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::dlpack::Owner;
use crate::errors::{config_error, job_error, raise, raise_peer};
use crate::fields::{FieldsArg, Records};
use crate::interrupt::{interruptible, SIGNAL_CHECK};
use crate::mixture::SourceCounts;
use crate::python_ops::PythonOps;
use crate::run::Run;
use crate::spec::Spec;
use crate::stats::{node_dict, stats_dict};
use crate::tensor::{objects, resolve_output, shared_objects, split_views, Output};
use crate::{arrow, device, live, remote, shared, state, user_code};

/// A data loader made from the spec `nostall.Loader` resolves (python/nostall/_loader.py,
/// which subclasses it and documents its arguments): its batches, state and figures.
#[pyclass(module = "nostall._nostall", subclass)]
pub(crate) struct Loader {
    inner: Arc<nostall::Loader>,
    output: Arc<Output>,
    dist: nostall::env::Distributed,
    /// Where the next `iter()` starts: the start of an epoch, or a checkpoint (from
    /// `load_state_dict`, or where an epoch stopped on an error).
    next: Position,
    resume: Option<nostall::Checkpoint>,
    /// The epoch being iterated (kept after it ends, for its metrics).
    current: Option<Run>,
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
    user: Option<user_code::UserSamples>,
    /// The pipeline's `ops.Python`, and their worker processes when they run in some.
    python_ops: Option<Arc<PythonOps>>,
    /// What each dataset of a mixture delivered (`source=[...]`).
    sources: Option<SourceCounts>,
    /// How many epochs `iter()` started: an iterator of an earlier one is stale.
    generation: u64,
    /// The preparers that make this loader's batches with it (`remote=`).
    remote: Option<nostall_remote::Remote>,
    /// This loader's batches served to a trainer's client (in a preparer: a Ray actor).
    serving: Option<nostall_remote::Server>,
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
    /// The loader `spec` describes: what `nostall.Loader` resolved from the user's
    /// arguments (python/nostall/_loader.py), whose docstring documents them.
    #[new]
    fn new(py: Python<'_>, spec: Spec) -> PyResult<Loader> {
        let python_ops = PythonOps::new(spec.torch_ops);
        let (mut builder, mut dist) = spec.builder(py, &python_ops)?;
        // Worker processes for the user's code: one per prep thread asked for, else a core.
        let worker_count = match builder.settings().threads {
            nostall::loader::Threads::Count(n) => n,
            _ => nostall::loader::usable_cores(),
        };
        let user = user_samples(py, &spec, &mut builder, worker_count)?;
        let python_ops = start_python_ops(py, &spec, python_ops, &builder, worker_count)?;
        let mut job = JobBuilder::new(builder);
        let user = user.map(|(opened, samples)| {
            job.dataset(opened);
            samples
        });
        if let Some(columns) = &spec.arrow {
            job.dataset(arrow::held_dataset(py, columns.bind(py))?);
        }
        let fields: Option<FieldsArg> = spec.fields.as_ref().map(|f| f.extract(py)).transpose()?;
        let shapes = fields.as_ref().map(FieldsArg::shapes).unwrap_or_default();
        attach_fields_and_mix(py, &spec, fields, &mut job)?;
        if let Some(capacity) = spec.node_capacity(py)? {
            let mut node = match &spec.node_store {
                Some(store) => NodeConfig::from_env_meeting_in(capacity, store.0.clone()),
                None => NodeConfig::from_env(capacity),
            }
            .map_err(|e| raise_peer(py, e))?;
            node.seed = job.loader().settings().plan.seed;
            job.on_node(node);
        }
        let output = Arc::new(resolve_output(py, &spec.output)?);
        let share = spec.share(py)?;
        let sharing = share != Share::Off;
        let device = attach_device(py, &spec, &output, sharing, &mut job)?;
        // With the device attached: the engine's pixels are then channels-last.
        let pad = job.loader().padding().map_err(|e| raise(py, e))?;
        if sharing {
            job.share(share)
                .start_agent_with(shared::agent_starter(py)?);
        }
        let job = interruptible(py, move || job.start())?.map_err(|e| job_error(py, e))?;
        (dist.rank, dist.world) = (job.rank, job.world);
        let goes_alone = job.goes_alone();
        let layout = job.loader.config().pipeline.layout().clone();
        let records = records_of(py, &layout, &job.loader, shapes, pad)?;
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
        live_until_exit(&inner);
        let sources =
            inner.config().plan.mixture.clone().map(|m| {
                SourceCounts::new(spec.mixture.iter().map(|(l, _)| l.clone()).collect(), m)
            });
        let layout = inner.config().pipeline.layout();
        let views = layout.views().to_vec();
        let record_views = layout
            .parts()
            .iter()
            .any(|p| matches!(p.form, PartForm::Views { .. }));
        check_views(py, &spec, (&views, record_views), sharing, &output)?;
        let endpoint = serve_metrics(py, &spec, &inner, &node, &shared, dist.rank)?;
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
            stack_views: spec.stack_views,
            batch_transform: spec.batch_transform,
            records,
            sources,
            user,
            python_ops,
            generation: 0,
            remote: None,
            serving: None,
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
            (Some(epoch), true, _) => py.detach(|| epoch.checkpoint(&self.inner)),
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
        // Prepared from there at once, unless remote preparers make it, skips of the epoch
        // so far go on from the saved counts, or it goes on in an order this loader's
        // settings would not deal (the epoch is then started when iterated).
        if self.shared.is_none()
            && self.remote.is_none()
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
        if let Some(client) = &self.remote {
            d.set_item("remote", remote::stats_list(py, client)?)?;
            d.set_item("remote_runs_ahead", client.runs_taken_ahead())?;
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

    /// Serves this loader's batches to the trainers of its job on `host:port` (port 0:
    /// a free one), to clients that hold the job's secret: what a remote preparer (a Ray
    /// actor of `remote=`) runs. Returns the address it listens on.
    fn _serve_remote(&mut self, py: Python<'_>, host: String, port: u16) -> PyResult<String> {
        let server = remote::serve(py, self.inner.clone(), &host, port)?;
        let address = server.local_addr().to_string();
        self.serving = Some(server);
        Ok(address)
    }

    /// Makes this loader's epochs with the preparers at `addresses` (each checked now:
    /// the secret both ways, the same dataset and settings), and returns the client the
    /// front updates as Ray moves them. Takes effect at the next `iter()`.
    fn _connect_remote(
        &mut self,
        py: Python<'_>,
        addresses: Vec<String>,
        options: remote::ClientOptions,
    ) -> PyResult<remote::RemoteClient> {
        if self.shared.is_some() {
            return Err(config_error(
                py,
                "remote= and share= cannot go together: batches are made by remote \
                 preparers or by the node agent's group, not both"
                    .into(),
            ));
        }
        if self.inner.config().pipeline.prep().decode_route().is_some() {
            return Err(config_error(
                py,
                "remote= cannot send batches whose images a GPU decodes (a decode route): \
                 let the preparers decode on their CPUs"
                    .into(),
            ));
        }
        let client = remote::connect(py, self.inner.clone(), addresses, &options)?;
        // Epoch 0, started ahead as the loader was made, would be this process's alone.
        let inner = self.inner.clone();
        py.detach(move || inner.stop_ahead());
        self.remote = Some(client.clone());
        Ok(remote::RemoteClient { remote: client })
    }

    fn __repr__(&self) -> String {
        let c = self.inner.config();
        let prepared_by = match (&self.shared, &self.remote) {
            (Some(shared), _) => format!("shared in the node agent's group {}", shared.group().0),
            (None, Some(remote)) => format!(
                "{} prep threads and {} remote preparers",
                c.prep_threads,
                remote.addresses().len()
            ),
            (None, None) => format!("{} prep threads", c.prep_threads),
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

/// The dataset and samples of a Dataset object given as the source (its `__getitem__`
/// runs as the user's code), its pipeline set on `builder`.
fn user_samples(
    py: Python<'_>,
    spec: &Spec,
    builder: &mut LoaderBuilder,
    workers: usize,
) -> PyResult<Option<(nostall::dataset::Dataset, user_code::UserSamples)>> {
    let Some(dataset) = &spec.dataset else {
        return Ok(None);
    };
    let args = user_code::UserArgs {
        mode: spec.workers.unwrap_or(user_code::Mode::Auto),
        workers,
        timeout: spec.timeout,
        worker_init_fn: spec.worker_init_fn.as_ref().map(|f| f.clone_ref(py)),
        seed: builder.settings().plan.seed,
    };
    let (pipeline, opened, samples) = user_code::UserSamples::new(py, dataset.bind(py), args)?;
    builder.pipeline(pipeline);
    Ok(Some((opened, samples)))
}

/// The pipeline's `ops.Python`, in worker processes when `workers="processes"` asks;
/// `None` when it has none. The settings of the user's code are refused where none runs.
fn start_python_ops(
    py: Python<'_>,
    spec: &Spec,
    python: Arc<PythonOps>,
    builder: &LoaderBuilder,
    workers: usize,
) -> PyResult<Option<Arc<PythonOps>>> {
    let for_workers = spec.workers.is_some() || spec.timeout.is_some();
    if spec.dataset.is_none() && (spec.worker_init_fn.is_some() || python.is_empty() && for_workers)
    {
        return Err(config_error(
            py,
            "workers= and timeout= run a Dataset object's __getitem__ or ops.Python, and \
             worker_init_fn= a Dataset's workers: give source= a Dataset (or ops.Python in \
             pipeline=)"
                .into(),
        ));
    }
    if python.is_empty() {
        return Ok(None);
    }
    let config = builder.config().map_err(|e| raise(py, e))?;
    // Threads unless asked: a function given arrays spends its time in NumPy's and
    // torch's kernels, which release the GIL, and measured faster in the threads than
    // through worker processes (docs/benchmarks.md).
    let processes = spec.workers == Some(user_code::Mode::Processes);
    if spec.timeout.is_some() && !processes {
        return Err(config_error(
            py,
            "timeout= bounds ops.Python in worker processes (workers=\"processes\"); in the \
             loader's threads a call is not bounded"
                .into(),
        ));
    }
    if processes && config.pipeline.modality() == nostall::Modality::Audio {
        return Err(config_error(
            py,
            "ops.Python in worker processes takes images and video clips; an audio \
             pipeline's run in the loader's threads (workers=\"threads\")"
                .into(),
        ));
    }
    if processes {
        let timeout = spec.timeout.map_or(
            user_code::DEFAULT_TIMEOUT,
            std::time::Duration::from_secs_f64,
        );
        let bytes = config.pipeline.layout().bytes();
        python.start_workers(py, workers, bytes, timeout)?;
    }
    Ok(Some(python))
}

/// Sets the job's loader's `fields=` and `mix=`.
fn attach_fields_and_mix(
    py: Python<'_>,
    spec: &Spec,
    fields: Option<FieldsArg>,
    job: &mut JobBuilder,
) -> PyResult<()> {
    if let Some(fields) = fields {
        let config = job.loader().config().map_err(|e| raise(py, e))?;
        let fields = fields.fields(py, config.pipeline.modality())?;
        if fields.samples() > 1 && (spec.device.is_some() || spec.mix.is_some()) {
            return Err(config_error(
                py,
                "fields= with two fields of the pipeline's modality and device= or mix= is \
                 not supported yet: the device finishes and mix= mixes one image a sample"
                    .into(),
            ));
        }
        job.loader_mut().fields(Some(fields));
    }
    if let Some(mix) = &spec.mix {
        job.loader_mut().mixup(Some(mix.borrow(py).0.clone()));
    }
    Ok(())
}

/// How batches of records become dictionaries, where the layout has fields (each cut to
/// its largest image as `pad` says).
fn records_of(
    py: Python<'_>,
    layout: &nostall::SampleLayout,
    loader: &nostall::Loader,
    shapes: Vec<(String, Vec<String>, bool)>,
    pad: Option<nostall::loader::PadToLargest>,
) -> PyResult<Option<Arc<Records>>> {
    if layout.parts().is_empty() {
        return Ok(None);
    }
    let catalog = loader.catalog().clone();
    Ok(Some(Arc::new(Records::new(
        py, layout, catalog, shapes, pad,
    )?)))
}

/// Keeps `loader` among those [`halt_at_exit`] halts.
fn live_until_exit(loader: &Arc<nostall::Loader>) {
    let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    live.retain(|loader| loader.strong_count() > 0);
    live.push(Arc::downgrade(loader));
}

/// The device batches are handed over on (`device=`), where one is asked for.
fn attach_device(
    py: Python<'_>,
    spec: &Spec,
    output: &Output,
    sharing: bool,
    job: &mut JobBuilder,
) -> PyResult<Option<device::Device>> {
    let Some(device) = &spec.device else {
        return Ok(None);
    };
    if !matches!(output, Output::Torch(_)) {
        return Err(config_error(
            py,
            "device= hands over torch tensors: use output=\"torch\" (or \"auto\" with torch \
             installed)"
                .into(),
        ));
    }
    if sharing {
        // The group's batches are the node agent's, made on the CPU for every member:
        // moved as they are.
        return device::Device::moving_shared(py, device, &spec.decode).map(Some);
    }
    let min_pixels = spec.gpu_decode_min_pixels;
    device::Device::attach(py, device, &spec.decode, min_pixels, job.loader_mut()).map(Some)
}

/// Refuses what cannot be done with the views a pipeline makes (`views`, empty for one, or
/// `in_record`: views of a record's image, with its fields).
fn check_views(
    py: Python<'_>,
    spec: &Spec,
    (views, in_record): (&[Vec<usize>], bool),
    sharing: bool,
    output: &Output,
) -> PyResult<()> {
    let refused = match (views.is_empty() && !in_record, sharing, output) {
        _ if in_record && spec.stack_views => {
            "stack_views=True stacks the views of images alone: with fields=, each view \
             comes as a tensor of its own, beside its targets; leave stack_views out"
        }
        (true, _, _) if spec.stack_views => {
            "stack_views=True stacks several views of a sample: give pipeline= a list of \
             pipelines"
        }
        (false, true, _) => "views with share=: the node agent's batches carry one image a sample",
        (false, _, Output::DLPack) => {
            "views are handed over as one torch tensor or NumPy array a view: use \
             output=\"torch\" or \"numpy\""
        }
        _ => return Ok(()),
    };
    Err(config_error(py, refused.into()))
}

/// The live metrics endpoint serving `loader` (`metrics_addr=`, else the environment's).
fn serve_metrics(
    py: Python<'_>,
    spec: &Spec,
    loader: &Arc<nostall::Loader>,
    node: &Option<live::NodeCounters>,
    shared: &Option<shared::Shared>,
    rank: usize,
) -> PyResult<Option<nostall::metrics::export::Registration>> {
    nostall::env::metrics_addr(spec.metrics_addr.as_deref())
        .map(|addr| {
            let figures = live::LoaderFigures {
                loader: loader.clone(),
                node: node.clone(),
                group: shared.as_ref().map(|s| s.last.clone()),
            };
            nostall::metrics::export::serve(&addr, Arc::new(figures), rank)
        })
        .transpose()
        .map_err(|e| raise(py, e))
}

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
        if let Some(remote) = &self.remote {
            let remote = remote.clone();
            let run = py
                .detach(move || {
                    // The run the last one started ahead is taken when it starts here.
                    let previous = match previous {
                        Some(Run::Remote(run)) => Some(run),
                        other => {
                            drop(other);
                            None
                        }
                    };
                    let start = match resume {
                        Some(checkpoint) => checkpoint,
                        None => inner.run_from(at)?,
                    };
                    remote.run_after(previous, start)
                })
                .map_err(|e| raise(py, e))?;
            self.current = Some(Run::Remote(run));
            self.active = true;
            return Ok(self.generation);
        }
        let epoch = py
            .detach(move || {
                drop(previous); // stops and joins its threads
                match resume {
                    Some(checkpoint) => inner.resume_saved(&checkpoint),
                    None => inner.resume(at),
                }
            })
            .map_err(|e| raise(py, e))?;
        self.current = Some(Run::Local(epoch));
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
                self.next = Position::start_of(epoch.position().epoch + 1);
                self.resume = None;
                Ok(None)
            }
            Some(Err(e)) => {
                // A later state_dict() must point after the batches already delivered,
                // not at where this iteration started.
                self.next = epoch.position();
                self.resume = Some(epoch.checkpoint(&self.inner));
                self.active = false;
                Err(raise(py, e))
            }
            Some(Ok(batch)) => {
                let after = epoch.position();
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
                self.current = Some(Run::Local(epoch));
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
            (Some(epoch), true, _) => epoch.position(),
            (_, _, Some(checkpoint)) => checkpoint.position,
            _ => self.next,
        }
    }
}
