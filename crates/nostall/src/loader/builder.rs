//! Loader assembly: a location and [settings](LoaderSettings) become a loader over the
//! opened dataset, with what the process around it provides (a pipeline made in code, a
//! device, a node's locality, where batch buffers live).
//!
//! ```no_run
//! use nostall::loader::{LoaderBuilder, LoaderSettings, PipelineSetting};
//!
//! # fn main() -> nostall::Result<()> {
//! let mut settings = LoaderSettings::default();
//! settings.pipeline = PipelineSetting::Preset("m5".into());
//! settings.plan.batch_size = 32;
//! settings.cache.capacity = "35%".parse()?;
//! let (loader, _dataset) = LoaderBuilder::with_settings("s3://bucket/fma/train", settings).open()?;
//! # let _ = loader;
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;
use std::time::Duration;

use crate::catalog::Catalog;
use crate::dataset::{self, Dataset};
use crate::env::LocalRanks;
use crate::error::{Error, Result};
use crate::fields::{Fields, RecordPrep};
use crate::plan::locality::Locality;
use crate::plan::mixture::{Mixture, Source as MixtureSource};
use crate::plan::Blocks;
use crate::prep::audio::AudioPipeline;
use crate::prep::image::{DeviceFinish, ImagePipeline, Layout, ViewsPipeline};
use crate::prep::mixup::{Mixup, MixupArgs};
use crate::prep::route::{DecodeRoute, RouteMode};
use crate::prep::{DType, Operators, Pipeline, VideoPipeline, VideoViewsPipeline};
use crate::storage::{Link, Source, Throttled};

use super::settings::{LoaderSettings, PipelineSetting, DEFAULT_IMAGE_SIZE};
use super::{Arena, DeviceQueue, Loader, LoaderConfig, PadToLargest, PageLock, PADDING_MASK};

/// A loader to be: where the data is, how to load it ([`LoaderSettings`]), and what the
/// process around it provides (a pipeline made in code, a device, a node's locality, where
/// batch buffers live).
#[derive(Debug, Clone)]
pub struct LoaderBuilder {
    location: String,
    settings: LoaderSettings,
    /// A pipeline made by the caller, used instead of the settings' one.
    made: Option<Pipeline>,
    /// Emulated links in front of the storage that change during a run, by the time each
    /// takes over; empty: the settings' `throttle`.
    link_phases: Vec<(Duration, Link)>,
    /// Batches for a device ([`LoaderBuilder::for_device`]).
    device: Option<ForDevice>,
    /// Object storage's settings as another process has them
    /// ([`LoaderBuilder::storage_environment`]); `None`: this process's environment.
    storage_environment: Option<Vec<(String, String)>>,
    locality: Option<Locality>,
    local_ranks: Option<LocalRanks>,
    arena: Arena,
    /// MixUp and CutMix of the batches ([`LoaderBuilder::mix`]).
    mixup: Option<MixupArgs>,
    /// The fields of each sample ([`LoaderBuilder::fields`]).
    fields: Option<Fields>,
    /// Several datasets mixed by weight ([`LoaderBuilder::mixture`]): each one's
    /// location and weight (`None`: its length); empty: the one at `location`.
    mixture: Vec<(String, Option<f64>)>,
}

/// How a loader prepares batches for a consumer that moves them to a device (the Python
/// `Loader`'s `device=`): buffers page-locked for the copy, an image pipeline's geometry
/// in 8-bit HWC pixels (the device converts and normalises: see
/// [`ImagePipeline::for_device`]), and, with a route, some JPEGs left to the device's
/// decoder.
#[derive(Debug, Clone)]
pub struct ForDevice {
    /// Locks the batch buffers; `None`: plain memory (copied to the device through a
    /// staging buffer, more slowly).
    pub page_lock: Option<Arc<dyn PageLock>>,
    /// Which JPEGs the device decodes; `None`: the CPU decodes every one.
    pub route: Option<Arc<DecodeRoute>>,
    /// Where the samples the route leaves to the device are queued as they are prepared,
    /// for a consumer that decodes them ahead of their batches; `None`: they travel in
    /// their batches only.
    pub queue: Option<Arc<DeviceQueue>>,
}

impl LoaderBuilder {
    /// A loader over `location` (see [`dataset::open`]) with the default settings.
    pub fn new(location: impl Into<String>) -> LoaderBuilder {
        LoaderBuilder::with_settings(location, LoaderSettings::default())
    }

    /// A loader over `location` (see [`dataset::open`]) with `settings`.
    pub fn with_settings(location: impl Into<String>, settings: LoaderSettings) -> LoaderBuilder {
        LoaderBuilder {
            location: location.into(),
            settings,
            made: None,
            link_phases: Vec::new(),
            device: None,
            storage_environment: None,
            locality: None,
            local_ranks: None,
            arena: Arena::Private,
            mixup: None,
            fields: None,
            mixture: Vec::new(),
        }
    }

    /// The settings.
    pub fn settings(&self) -> &LoaderSettings {
        &self.settings
    }

    /// The settings, to change.
    pub fn settings_mut(&mut self) -> &mut LoaderSettings {
        &mut self.settings
    }

    /// The dataset's location, as given.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The settings, when they, with the [fields](Self::given_fields) and the
    /// [mixture](Self::sources), say everything this builder makes: what another process
    /// (the node agent) needs to make the same loader. `None` once something was given
    /// that is not a setting (a pipeline made in code or calling a function of the
    /// caller's, phases of a link, a device, a locality).
    pub fn portable_settings(&self) -> Option<&LoaderSettings> {
        let calls_code = matches!(&self.settings.pipeline,
            PipelineSetting::Operators(ops) if ops.call_user_code());
        let portable = self.made.is_none()
            && !calls_code
            && self.link_phases.is_empty()
            && self.device.is_none()
            && self.locality.is_none();
        portable.then_some(&self.settings)
    }

    /// Prepares batches for a device (see [`ForDevice`]). A loader for a device is not
    /// shared through the node agent: its settings are no longer
    /// [portable](Self::portable_settings).
    pub fn for_device(&mut self, device: ForDevice) -> &mut LoaderBuilder {
        self.device = Some(device);
        self
    }

    /// What the device does to the batches of an image pipeline after the engine
    /// ([`ImagePipeline::for_device`]); `None` without [`for_device`](Self::for_device)
    /// or for audio, whose batches are moved as they are.
    ///
    /// # Errors
    ///
    /// Those of [`LoaderBuilder::config`].
    pub fn device_finish(&self) -> Result<Option<DeviceFinish>> {
        self.config()?;
        if self.device.is_none() {
            return Ok(None);
        }
        if let Some(video) = self.user_video_pipeline()? {
            return Ok(Some(video.for_device()?.1));
        }
        self.user_image_pipeline()?
            .map(|p| p.for_device().map(|(_, finish)| finish))
            .transpose()
    }

    /// How the batches of the loader it builds are cut to their largest image
    /// (`pad_to_largest`); `None` where that is unset.
    ///
    /// # Errors
    ///
    /// Those of [`LoaderBuilder::config`].
    pub fn padding(&self) -> Result<Option<PadToLargest>> {
        let Some(multiple) = self.settings.pad_to_largest else {
            return Ok(None);
        };
        let config = self.config()?;
        // For a device the engine leaves 8-bit channels-last pixels, finished there.
        let layout = match self.device {
            Some(_) => Layout::Hwc,
            None => self.settings.layout,
        };
        PadToLargest::new(config.pipeline.layout(), layout, multiple).map(Some)
    }

    /// The image pipeline the user asked for, before any split for a device; `None` for
    /// audio and a pipeline made by the caller.
    fn user_image_pipeline(&self) -> Result<Option<ImagePipeline>> {
        if self.made.is_some() {
            return Ok(None);
        }
        let s = &self.settings;
        let ops = match &s.pipeline {
            PipelineSetting::Preset(name) if AudioPipeline::PRESETS.contains(&name.as_str()) => {
                None
            }
            PipelineSetting::Preset(name) => {
                let size = s.image_size.unwrap_or(DEFAULT_IMAGE_SIZE);
                Some(ImagePipeline::preset(name, size)?.ops().to_vec())
            }
            PipelineSetting::Operators(Operators::Image(ops)) => Some(ops.clone()),
            PipelineSetting::Operators(
                Operators::Audio(_)
                | Operators::Views(_)
                | Operators::Video(..)
                | Operators::VideoViews(_),
            ) => None,
        };
        ops.map(|ops| ImagePipeline::new(ops, s.dtype, s.layout))
            .transpose()
    }

    /// The video pipeline the user asked for, before any split for a device; `None` for
    /// other operators and a pipeline made by the caller.
    fn user_video_pipeline(&self) -> Result<Option<VideoPipeline>> {
        let s = &self.settings;
        match (&self.made, &s.pipeline) {
            (None, PipelineSetting::Operators(Operators::Video(clip, ops))) => {
                let video = VideoPipeline::new(clip.clone(), ops.clone(), s.dtype, s.layout)?;
                Ok(Some(self.with_frame_indexes(video)))
            }
            _ => Ok(None),
        }
    }

    /// `video` with the frame indexes the `frame_index_cache` setting asks for: in memory
    /// and in the dataset's file beside its index.
    #[cfg(feature = "video")]
    fn with_frame_indexes(&self, video: VideoPipeline) -> VideoPipeline {
        let locations: Vec<&str> = if self.mixture.is_empty() {
            vec![&self.location]
        } else {
            self.mixture.iter().map(|(l, _)| l.as_str()).collect()
        };
        video.with_index_file(
            usize::try_from(self.settings.frame_index_cache).unwrap_or(usize::MAX),
            crate::prep::video::IndexFile::for_dataset(&locations),
        )
    }

    /// Without the `video` feature no video is decoded, and no index kept.
    #[cfg(not(feature = "video"))]
    fn with_frame_indexes(&self, video: VideoPipeline) -> VideoPipeline {
        video
    }

    /// `image` as the loader runs it: whole, or split for the device.
    fn for_consumer(&self, image: ImagePipeline) -> Result<Pipeline> {
        let Some(device) = &self.device else {
            return Ok(image.into());
        };
        let (geometry, _) = image.for_device()?;
        Ok(match &device.route {
            Some(route) => geometry.with_decode_route(route.clone()).into(),
            None => geometry.into(),
        })
    }

    /// Uses `pipeline` (any modality's, or one of your own) instead of the settings'.
    pub fn pipeline(&mut self, pipeline: Pipeline) -> &mut LoaderBuilder {
        self.made = Some(pipeline);
        self
    }

    /// Puts emulated links in front of the storage, each from its time on (measured from
    /// when the loader is built): storage that changes during a run
    /// ([`Throttled::phased`]). They replace the settings' `throttle`.
    pub fn link_phases(&mut self, phases: Vec<(Duration, Link)>) -> &mut LoaderBuilder {
        self.link_phases = phases;
        self
    }

    /// Plans each epoch locality-aware ([`LoaderConfig::locality`]): a rank of a
    /// partitioned cache takes the samples its node holds.
    pub fn locality(&mut self, locality: Option<Locality>) -> &mut LoaderBuilder {
        self.locality = locality;
        self
    }

    /// The ranks this loader balances its threads with ([`LoaderConfig::local_ranks`]);
    /// `None`: the launcher's.
    pub fn local_ranks(&mut self, ranks: Option<LocalRanks>) -> &mut LoaderBuilder {
        self.local_ranks = ranks;
        self
    }

    /// Mixes each batch as timm's `Mixup` does ([`LoaderConfig::mix`]), for images
    /// laid out as the settings say; `None`: no mixing.
    pub fn mixup(&mut self, args: Option<MixupArgs>) -> &mut LoaderBuilder {
        self.mixup = args;
        self
    }

    /// Reads each sample as a record of `fields` ([`crate::fields`]): the pipeline
    /// prepares the field of its modality, and the batch's slot holds every field;
    /// `None`: the sample alone. WebDataset shards only, for now.
    pub fn fields(&mut self, fields: Option<Fields>) -> &mut LoaderBuilder {
        self.fields = fields;
        self
    }

    /// The fields given ([`LoaderBuilder::fields`]).
    pub fn given_fields(&self) -> Option<&Fields> {
        self.fields.as_ref()
    }

    /// The datasets of a mixture and their weights ([`LoaderBuilder::mixture`]); empty for
    /// one dataset.
    pub fn sources(&self) -> &[(String, Option<f64>)] {
        &self.mixture
    }

    /// Draws from several datasets by weight (each a location as [`dataset::open`] takes
    /// it, and a positive weight; `None`: its number of samples) instead of the one at the
    /// builder's location: every epoch holds as many samples as they do together, each
    /// dataset's share its weight's ([`crate::plan::mixture`]).
    pub fn mixture(&mut self, sources: Vec<(String, Option<f64>)>) -> &mut LoaderBuilder {
        if !sources.is_empty() {
            let names: Vec<&str> = sources.iter().map(|(l, _)| l.as_str()).collect();
            self.location = names.join(" + ");
        }
        self.mixture = sources;
        self
    }

    /// Where batch buffers live ([`LoaderConfig::arena`]).
    pub fn arena(&mut self, arena: Arena) -> &mut LoaderBuilder {
        self.arena = arena;
        self
    }

    /// The configuration the loader will run with (the pipeline resolved).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when the settings do not fit together: a preset that does not
    /// fit `image_size` (0), image settings with an audio preset or a pipeline made by
    /// the caller, `image_size` with a list of operators, operators that do not make a
    /// pipeline, no thread of a kind, no batch or no prefetch, a rank outside the world,
    /// a batch larger than a batch may be, a quarantine file without the skip policy.
    pub fn config(&self) -> Result<LoaderConfig> {
        let s = &self.settings;
        let images_set = s.image_size.is_some() || s.dtype != DType::F32 || s.layout != Layout::Chw;
        let pipeline = match (&self.made, &s.pipeline) {
            (Some(_), _) if images_set => {
                return Err(Error::Config(
                    "image_size, dtype and layout apply to presets and lists of operators, \
                     not to a pipeline given whole"
                        .into(),
                ))
            }
            (Some(made), _) => made.clone(),
            (None, PipelineSetting::Preset(name))
                if AudioPipeline::PRESETS.contains(&name.as_str()) =>
            {
                if images_set {
                    return Err(Error::Config(format!(
                        "pipeline={name:?} prepares audio as float32 waveforms or \
                         spectrograms: image_size, dtype and layout apply to images only"
                    )));
                }
                Pipeline::preset(name, DEFAULT_IMAGE_SIZE)?
            }
            (None, PipelineSetting::Operators(Operators::Image(_))) if s.image_size.is_some() => {
                return Err(Error::Config(
                    "image_size sets the size of the \"train\" and \"val\" presets; with a \
                     list of operators, give the sizes to the operators (e.g. \
                     RandomResizedCrop(224) or CenterCrop(224))"
                        .into(),
                ))
            }
            (
                None,
                PipelineSetting::Preset(_) | PipelineSetting::Operators(Operators::Image(_)),
            ) => {
                let image = self.user_image_pipeline()?;
                let image = image.expect("an image preset or image operators");
                let user = image.ops().iter().find(|op| op.name() == "Python");
                if let (Some(op), Some(_)) = (user, &self.device) {
                    return Err(Error::Config(format!(
                        "{op} with a device: the device finishes the samples after the \
                         engine, so a function of yours would not see them as written"
                    )));
                }
                self.for_consumer(image)?
            }
            (None, PipelineSetting::Operators(Operators::Audio(_))) if images_set => {
                return Err(Error::Config(
                    "audio operators prepare float32 waveforms or spectrograms: image_size, \
                     dtype and layout apply to images only"
                        .into(),
                ))
            }
            (None, PipelineSetting::Operators(Operators::Audio(ops))) => {
                AudioPipeline::new(ops.clone())?.into()
            }
            (None, PipelineSetting::Operators(Operators::Video(..) | Operators::VideoViews(_)))
                if s.image_size.is_some() =>
            {
                return Err(Error::Config(
                    "image_size sets the size of the \"train\" and \"val\" presets; with a \
                     video's operators, give the sizes to them (e.g. RandomCrop(224))"
                        .into(),
                ))
            }
            (None, PipelineSetting::Operators(Operators::Video(..))) => {
                let video = self.user_video_pipeline()?.expect("a video's operators");
                match &self.device {
                    None => video.into(),
                    Some(device) => {
                        if device
                            .route
                            .as_ref()
                            .is_some_and(|r| r.mode() == RouteMode::Always)
                        {
                            return Err(Error::Config(
                                "decode=\"gpu\" leaves JPEGs to the device's decoder, and \
                                 videos are decoded on the CPU: leave decode= out"
                                    .into(),
                            ));
                        }
                        video.for_device()?.0.into()
                    }
                }
            }
            (None, PipelineSetting::Operators(Operators::VideoViews(views))) => {
                if self.device.is_some() {
                    return Err(Error::Config(
                        "views are prepared on the CPU and delivered there: without device=, \
                         move each view's tensor yourself"
                            .into(),
                    ));
                }
                if self.mixup.is_some() {
                    return Err(Error::Config(
                        "Mixup mixes one clip a sample: it does not apply to views".into(),
                    ));
                }
                // Every view reads the first one's frame indexes.
                let views = views
                    .iter()
                    .map(|(clip, ops)| {
                        VideoPipeline::new(clip.clone(), ops.clone(), s.dtype, s.layout)
                            .map(|view| self.with_frame_indexes(view))
                    })
                    .collect::<Result<_>>()?;
                VideoViewsPipeline::new(views)?.into()
            }
            (None, PipelineSetting::Operators(Operators::Views(_))) if s.image_size.is_some() => {
                return Err(Error::Config(
                    "image_size sets the size of the \"train\" and \"val\" presets; with \
                     views, give the sizes to each view's operators"
                        .into(),
                ))
            }
            (None, PipelineSetting::Operators(Operators::Views(views))) => {
                if self.device.is_some() {
                    return Err(Error::Config(
                        "views are prepared on the CPU and delivered there: without device=, \
                         move each view's tensor yourself"
                            .into(),
                    ));
                }
                if self.mixup.is_some() {
                    return Err(Error::Config(
                        "Mixup mixes one image a sample: it does not apply to views".into(),
                    ));
                }
                let views = views
                    .iter()
                    .map(|ops| ImagePipeline::new(ops.clone(), s.dtype, s.layout))
                    .collect::<Result<_>>()?;
                ViewsPipeline::new(views)?.into()
            }
        };
        let own_sizes = pipeline.prep().batch_canvas();
        let pipeline = match &self.fields {
            None => pipeline,
            Some(fields) => Pipeline::new(RecordPrep::new(pipeline, fields.clone())?),
        };
        if s.pad_to_largest.is_some() && own_sizes.is_none() {
            return Err(Error::Config(
                "pad_to_largest cuts each batch to its largest image, and every image of this \
                 pipeline has the same size: it needs an operator that gives each its own on \
                 the batch's canvas (RandomShortestSize or DetrRandomResize with max_size)"
                    .into(),
            ));
        }
        let mut config = s.config_with(pipeline);
        config.locality.clone_from(&self.locality);
        config.local_ranks = self.local_ranks;
        config.arena = self.arena;
        if let Some(device) = &self.device {
            config.page_lock.clone_from(&device.page_lock);
            config.device_queue.clone_from(&device.queue);
        }
        if let Some(args) = &self.mixup {
            if self.device.is_some() {
                return Err(Error::Config(
                    "Mixup mixes batches on the CPU, in the pipeline's type and layout: \
                     without device=, move the mixed batch yourself"
                        .into(),
                ));
            }
            if self.fields.as_ref().is_some_and(Fields::has_targets) {
                return Err(Error::Config(
                    "Mixup mixes two images into one, and boxes and masks do not follow a \
                     mix: leave mix= out of a loader with boxes or a mask"
                        .into(),
                ));
            }
            config.mixup = Some(Mixup::new(args.clone(), s.layout)?);
        }
        config.check()?;
        Ok(config)
    }

    /// Opens the dataset for the pipeline's modality (its catalog and unthrottled
    /// source); [`LoaderBuilder::build`] then makes the loader over it, or over a source
    /// in front of it (a node's partitioned cache, say).
    ///
    /// # Errors
    ///
    /// Those of [`LoaderBuilder::config`] and [`dataset::open`].
    pub fn open_dataset(&self) -> Result<Dataset> {
        let modality = self.config()?.pipeline.modality();
        let var = |name: &str| match &self.storage_environment {
            None => std::env::var(name).ok(),
            Some(vars) => vars
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, value)| value.clone()),
        };
        let mut columns = self.settings.columns.clone();
        columns.record = self.fields.as_ref().map(Fields::others);
        columns.sub_columns = self
            .fields
            .as_ref()
            .map(Fields::sub_columns)
            .unwrap_or_default();
        if !self.mixture.is_empty() {
            let locations: Vec<String> = self.mixture.iter().map(|(l, _)| l.clone()).collect();
            return dataset::open_mixture(&locations, self.settings.read, modality, &columns, &var);
        }
        dataset::open_in(&self.location, self.settings.read, modality, &columns, &var)
    }

    /// Reads object storage with these values of [`crate::storage::S3_ENVIRONMENT`]
    /// (the variables a job had set) instead of this process's environment: a process
    /// that reads for other jobs (the node agent) reads each job's data from its server,
    /// as that job.
    pub fn storage_environment(&mut self, vars: Vec<(String, String)>) -> &mut Self {
        self.storage_environment = Some(vars);
        self
    }

    /// Makes the loader over `catalog`, reading from `source` (behind the `throttle`
    /// link or the link phases, if set).
    ///
    /// # Errors
    ///
    /// Those of [`LoaderBuilder::config`] and [`Loader::new`].
    pub fn build(&self, catalog: Arc<Catalog>, source: Arc<dyn Source>) -> Result<Loader> {
        let unlabeled = catalog.is_empty() || catalog.label(0).is_none();
        if unlabeled && self.fields.as_ref().is_some_and(Fields::has_label) {
            return Err(Error::Config(format!(
                "fields= asks for a label, and the samples of {} have none (a .cls member, a \
                 manifest's label)",
                self.location
            )));
        }
        let phases = match (self.link_phases.is_empty(), self.settings.throttle) {
            (false, _) => self.link_phases.clone(),
            (true, Some(link)) => vec![(Duration::ZERO, link)],
            (true, None) => Vec::new(),
        };
        let source: Arc<dyn Source> = if phases.is_empty() {
            source
        } else {
            Arc::new(Throttled::phased(source, phases))
        };
        let config = self.config_over(&catalog)?;
        // Checked here, with the fields final (a binding asks `config` for the modality
        // before it makes them).
        if let Some(op) = config.pipeline.prep().targets_needed() {
            return Err(Error::Config(format!(
                "{op} draws its window against the sample's boxes: read them with a boxes \
                 field (fields={{\"image\": \"image\", \"boxes\": Field(\"coco\", \
                 kind=\"boxes\")}})"
            )));
        }
        if let Some(multiple) = self.settings.pad_to_largest {
            check_padding(&config.pipeline, self.settings.layout, multiple)?;
        }
        Loader::new(catalog, source, config)
    }

    /// The configuration the loader [`LoaderBuilder::build`] makes over `catalog` runs
    /// with, without making it: what only the catalog settles resolved (the memory
    /// budget split, the order dealt in groups of samples as `group_memory` allows, a
    /// mixture's datasets and their groups). Builders whose settings read alike may deal
    /// different orders over one catalog; their resolved plans tell (the node agent
    /// groups jobs by them).
    ///
    /// # Errors
    ///
    /// Those of [`LoaderBuilder::config`], a mixture that does not fit the catalog, and a
    /// memory budget that cannot hold the pipeline.
    pub fn resolved(&self, catalog: &Catalog) -> Result<LoaderConfig> {
        let config = self.config_over(catalog)?;
        Ok(super::loader::resolved_config(&config, catalog)?.0)
    }

    /// [`LoaderBuilder::config`] with the mixture's datasets over `catalog`.
    fn config_over(&self, catalog: &Catalog) -> Result<LoaderConfig> {
        let mut config = self.config()?;
        if !self.mixture.is_empty() {
            if catalog.sources().len() != self.mixture.len() {
                return Err(Error::Config(format!(
                    "a mixture of {} datasets over a catalog of {}: open it with \
                     LoaderBuilder::open_dataset",
                    self.mixture.len(),
                    catalog.sources().len()
                )));
            }
            let sources: Vec<MixtureSource> = catalog
                .sources()
                .iter()
                .zip(&self.mixture)
                .map(|(&len, &(_, weight))| MixtureSource {
                    len,
                    weight: weight.unwrap_or(len as f64),
                })
                .collect();
            if config.pipeline.prep().decode_route().is_some() {
                // The device's decoder keys a sample by its id; a mixture's epoch may hold
                // a sample twice, each with its own crop.
                return Err(Error::Config(
                    "a mixture of datasets is decoded on the CPU: give decode=\"cpu\" with \
                     device="
                        .into(),
                ));
            }
            let mut mixture = Mixture::new(&sources, None)?;
            // A dataset read in groups (Parquet) keeps a few open, its share of the memory
            // for groups.
            let grouped = catalog.source_groups().filter(|g| !g.is_empty()).count();
            let memory = config
                .group_memory
                .unwrap_or(crate::storage::DEFAULT_GROUP_MEMORY)
                / grouped.max(1) as u64;
            let mut first = 0u64;
            for (s, groups) in catalog.source_groups().enumerate() {
                let len = sources[s].len as u64;
                let bytes = (first..first + len).map(|id| catalog.size(id)).sum();
                if let Some(blocks) = Blocks::within(groups, bytes, memory) {
                    mixture = mixture.with_blocks(s, blocks)?;
                }
                first += len;
            }
            config.plan.mixture = Some(mixture);
            config.check()?;
        }
        Ok(config)
    }

    /// Opens the dataset and makes the loader over it; the dataset comes back too.
    ///
    /// # Errors
    ///
    /// Those of [`LoaderBuilder::open_dataset`] and [`LoaderBuilder::build`].
    pub fn open(&self) -> Result<(Loader, Dataset)> {
        let dataset = self.open_dataset()?;
        let loader = self.build(dataset.catalog.clone(), dataset.source.clone())?;
        Ok((loader, dataset))
    }
}

/// Refuses `pad_to_largest` (`multiple`) where the loader's `records` cannot be cut to
/// their largest image: without the boxes field that says each image's size, with a
/// multiple of 0, or with a field named as the padding mask the batch gains.
fn check_padding(records: &Pipeline, layout: Layout, multiple: u32) -> Result<()> {
    let records = records.layout();
    PadToLargest::new(records, layout, multiple)?;
    if records.parts().iter().any(|p| p.name == PADDING_MASK) {
        return Err(Error::Config(format!(
            "pad_to_largest adds the batch's {PADDING_MASK:?}, and a field has that name: \
             name the field otherwise"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prep::audio::AudioOp;

    /// A builder over a dataset that is never opened, with `texts` set.
    fn builder(texts: &[(&str, &str)]) -> LoaderBuilder {
        LoaderBuilder::with_settings(
            "/data",
            LoaderSettings::from_texts(texts.iter().copied()).unwrap(),
        )
    }

    #[test]
    fn settings_resolve_to_the_configuration() {
        let c = builder(&[("pipeline", "val"), ("image_size", "96"), ("layout", "HWC")])
            .config()
            .unwrap();
        assert_eq!(c.pipeline.layout().shape(), [96, 96, 3]);
        let audio = builder(&[("pipeline", "m5")]).config().unwrap();
        assert_eq!(audio.pipeline.layout().shape(), [1, 32_000]);
        let why = builder(&[("pipeline", "m5"), ("layout", "HWC")])
            .config()
            .unwrap_err()
            .to_string();
        assert!(why.contains("images only"), "{why}");
    }

    #[test]
    fn settings_that_cannot_work_are_refused_before_anything_is_opened() {
        for (name, value, says) in [
            ("threads", "0", "thread"),
            ("fetch_threads", "0", "thread"),
            ("prefetch", "0", "prefetch"),
            ("batch_size", "0", "batch size"),
            ("rank", "2", "rank 2"),
            ("quarantine", "/tmp/q.jsonl", "skip"),
            ("cache_policy", "frequency", "cache_epochs"),
        ] {
            // A location that does not exist: only the settings can be refused.
            let why = builder(&[(name, value)]).config().unwrap_err().to_string();
            assert!(why.contains(says), "{name}={value}: {why}");
        }
        let mut b = LoaderBuilder::new("/data");
        b.settings_mut().readahead = 0;
        let why = b.config().unwrap_err().to_string();
        assert!(why.contains("readahead"), "{why}");
    }

    #[test]
    fn pad_to_largest_needs_images_of_their_own_sizes() {
        let why = builder(&[("pad_to_largest", "32")])
            .config()
            .unwrap_err()
            .to_string();
        assert!(why.contains("RandomShortestSize"), "{why}");
        let own = "[RandomShortestSize(min_size=[200], max_size=400)]";
        let b = builder(&[("pipeline", own), ("pad_to_largest", "32")]);
        b.config().unwrap();
        // Without fields there is no boxes field to read the sizes from.
        let why = b.padding().unwrap_err().to_string();
        assert!(why.contains("boxes field"), "{why}");
    }

    #[test]
    fn image_settings_that_would_be_ignored_are_refused() {
        let mut b = LoaderBuilder::new("/data");
        b.settings_mut().pipeline = PipelineSetting::Operators(Operators::Image(
            ImagePipeline::imagenet_val(64).ops().to_vec(),
        ));
        b.settings_mut().layout = Layout::Hwc;
        assert_eq!(b.config().unwrap().pipeline.layout().shape(), [64, 64, 3]);
        // The operators end with Normalize, which needs float output.
        b.settings_mut().dtype = DType::U8;
        let why = b.config().unwrap_err().to_string();
        assert!(why.contains("Normalize"), "{why}");
        b.settings_mut().dtype = DType::F32;
        b.settings_mut().image_size = Some(96);
        let why = b.config().unwrap_err().to_string();
        assert!(why.contains("give the sizes to the operators"), "{why}");

        let mut b = LoaderBuilder::new("/data");
        b.settings_mut().pipeline = PipelineSetting::Operators(Operators::Audio(vec![
            AudioOp::resample(8_000),
            AudioOp::center_crop(100),
        ]));
        assert_eq!(b.config().unwrap().pipeline.layout().shape(), [1, 100]);
        b.settings_mut().layout = Layout::Hwc;
        let why = b.config().unwrap_err().to_string();
        assert!(why.contains("images only"), "{why}");

        let mut b = LoaderBuilder::new("/data");
        b.pipeline(Pipeline::imagenet_val(64)).settings_mut().dtype = DType::U8;
        let why = b.config().unwrap_err().to_string();
        assert!(why.contains("not to a pipeline given whole"), "{why}");
        assert!(
            b.portable_settings().is_none(),
            "a pipeline made in code has no text"
        );
    }

    #[test]
    fn operators_are_settings_another_process_can_replay() {
        let ops = Operators::Audio(vec![
            AudioOp::channels(2),
            AudioOp::resample(22_050),
            AudioOp::random_crop(4_410),
        ]);
        let mut b = LoaderBuilder::new("/data");
        b.settings_mut().plan.batch_size = 8;
        b.settings_mut().pipeline = PipelineSetting::Operators(ops.clone());
        let texts = b.portable_settings().expect("settings alone").texts();
        assert_eq!(texts[0], ("pipeline".to_string(), ops.to_string()));
        let replayed = LoaderBuilder::with_settings(
            "/data",
            LoaderSettings::from_texts(texts.iter().map(|(n, v)| (&**n, &**v))).unwrap(),
        );
        let (a, b) = (b.config().unwrap(), replayed.config().unwrap());
        assert_eq!(a.pipeline.layout(), b.pipeline.layout());
        assert_eq!(format!("{:?}", a.pipeline), format!("{:?}", b.pipeline));
        assert_eq!(b.plan.batch_size, 8);

        let hand = builder(&[
            ("pipeline", "[Resize(256), CenterCrop(224)]"),
            ("dtype", "uint8"),
        ]);
        assert_eq!(
            hand.config().unwrap().pipeline.layout().shape(),
            [3, 224, 224]
        );
    }
}
