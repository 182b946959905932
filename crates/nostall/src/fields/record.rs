//! [`RecordPrep`]: a record's members into its fields' parts of a slot.

use super::kind::Targets;
use super::{Field, Fields, Role};
use crate::error::{Cause, Error, Result};
use crate::prep::{Pipeline, Prep, Prepared, Preparer};
use crate::rng::Rng;
use crate::sample::{Modality, Part, PartForm, SampleId, SampleLayout};
use crate::storage::record::{members, RecordMember};

/// A loader's pipeline with the other fields of each sample: the [`Prep`] of a loader
/// given [`Fields`]. Its samples are records read as
/// [`TarShards::records_from_listing`](crate::storage::TarShards::records_from_listing)
/// reads them.
#[derive(Debug)]
pub struct RecordPrep {
    sample: Pipeline,
    fields: Fields,
    layout: SampleLayout,
}

impl RecordPrep {
    /// `fields`, the sample's prepared by `sample`.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] where a field follows the sample's geometry (boxes) and
    /// `sample`'s pipeline has none, or moves pixels where targets do not follow
    /// ([`Prep::places_targets`]).
    pub fn new(sample: Pipeline, fields: Fields) -> Result<RecordPrep> {
        if let Some(target) = fields.iter().find(|f| f.kind.targets().is_some()) {
            sample
                .prep()
                .places_targets()
                .map_err(|why| Error::Config(format!("field {:?}: {why}", target.name)))?;
        }
        // Each view's output, or the one image's.
        let views = sample.layout().view_layouts();
        let images = match views.is_empty() {
            true => sample.layout().image().into_iter().collect(),
            false => views
                .iter()
                .filter_map(SampleLayout::image)
                .collect::<Vec<_>>(),
        };
        for (height, width) in images {
            for field in fields.iter() {
                if let Some(targets) = field.kind.targets() {
                    targets
                        .fits((width, height))
                        .map_err(|why| Error::Config(format!("field {:?}: {why}", field.name)))?;
                }
            }
        }
        if let Some(spanned) = fields.iter().find(|f| f.kind.role() == Role::Spans) {
            if sample.modality() != Modality::Video {
                return Err(Error::Config(format!(
                    "field {:?} is the audio track of a video's clips, and this loader's \
                     pipeline reads {}",
                    spanned.name,
                    sample.modality().plural()
                )));
            }
            if !views.is_empty() {
                return Err(Error::Config(format!(
                    "field {:?} is the audio track of a video's clips, and with views each \
                     view has clips of its own: give the views' pipeline one Clip, or leave \
                     the audio field out",
                    spanned.name
                )));
            }
        }
        let layout = fields.layout(sample.layout());
        Ok(RecordPrep {
            sample,
            fields,
            layout,
        })
    }
}

impl std::fmt::Display for RecordPrep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} with fields ", self.sample)?;
        let names: Vec<&str> = self.fields.iter().map(|f| f.name.as_str()).collect();
        f.write_str(&names.join(", "))
    }
}

impl Prep for RecordPrep {
    fn modality(&self) -> Modality {
        self.sample.modality()
    }

    fn layout(&self) -> SampleLayout {
        self.layout.clone()
    }

    fn fingerprint(&self) -> String {
        format!(
            "{} fields [{}]",
            self.sample.prep().fingerprint(),
            self.fields.fingerprint()
        )
    }

    fn decode_route(&self) -> Option<&crate::prep::route::DecodeRoute> {
        self.sample.prep().decode_route()
    }

    fn targets_needed(&self) -> Option<&'static str> {
        match self.fields.has_boxes() {
            true => None,
            false => self.sample.prep().targets_needed(),
        }
    }

    fn preparer(&self) -> Result<Box<dyn Preparer>> {
        Ok(Box::new(RecordPreparer {
            sample: self.sample.prep().preparer()?,
            modality: self.sample.modality(),
            fields: self.fields.clone(),
            parts: self.layout.parts().to_vec(),
        }))
    }
}

/// Parts of the sample's generator for its later fields of the loader's modality.
const OTHER_SAMPLES: u64 = 0x5345_434f_4e44_0000;

struct RecordPreparer {
    sample: Box<dyn Preparer>,
    modality: Modality,
    fields: Fields,
    parts: Vec<Part>,
}

impl Preparer for RecordPreparer {
    fn prepare(&mut self, data: &[u8], rng: &mut Rng, out: &mut [u8]) -> Result<Prepared, Cause> {
        let members = members(data)?;
        let first = self.fields.first_sample();
        // The targets are read first: the geometry's draws may read the boxes (of the first
        // target field), and they are placed once the sample is.
        let mut targets = Vec::new();
        for (i, field) in self.fields.iter().enumerate() {
            if let Some(kind) = field.kind.targets() {
                let bytes = member(data, &members, field, None)?;
                targets.push((i, kind.read(&field.name, bytes)?));
            }
        }
        let corners = targets
            .iter()
            .find_map(|(_, t): &(usize, Targets)| t.corners())
            .unwrap_or_default();
        let mut prepared = Prepared::InSlot;
        #[cfg(feature = "video")]
        let mut spans: Option<Vec<nostall_video::Span>> = None;
        for (i, (field, part)) in self.fields.iter().zip(&self.parts).enumerate() {
            let role = field.kind.role();
            if matches!(role, Role::Label | Role::Target | Role::Spans) {
                continue;
            }
            let slot = &mut out[part.offset..part.offset + part.form.bytes()];
            let bytes = member(data, &members, field, (i == first).then_some(self.modality))?;
            match role {
                Role::Label | Role::Target | Role::Spans => {}
                Role::Sample if i == first => {
                    prepared = self.sample.prepare_targeted(bytes, &corners, rng, slot)?;
                    // Taken now: a later field of the modality (a second video) is
                    // prepared by the same preparer.
                    #[cfg(feature = "video")]
                    {
                        spans = self.sample.clip_spans().map(<[_]>::to_vec);
                    }
                }
                Role::Sample => {
                    // A second image of the sample: draws of its own, the first's unchanged.
                    let mut own = rng.fork(OTHER_SAMPLES + i as u64);
                    if let Prepared::Deferred(_) = self.sample.prepare(bytes, &mut own, slot)? {
                        return Err(Cause::Internal(format!(
                            "field {:?} was left to a device, which decodes one image a sample",
                            field.name
                        )));
                    }
                }
                Role::Member => field.prepare(bytes, slot)?,
            }
        }
        #[cfg(feature = "video")]
        for (field, part) in self.fields.iter().zip(&self.parts) {
            if field.kind.role() != Role::Spans {
                continue;
            }
            // The sample's own member: the video its clips were drawn from.
            let bytes = member(data, &members, field, Some(self.modality))?;
            let spans = spans.as_deref().ok_or_else(|| {
                Cause::Internal(format!(
                    "field {:?} follows the clips of a sample that has none",
                    field.name
                ))
            })?;
            let slot = &mut out[part.offset..part.offset + part.form.bytes()];
            field
                .kind
                .prepare_spanned(&field.name, bytes, spans, slot)?;
        }
        // Asked once for all the target fields (it draws the moves after the geometry).
        let mut placed = Vec::new();
        for (i, read) in targets {
            let field = self.fields.iter().nth(i).expect("a field of the record");
            let part = &self.parts[i];
            let slot = &mut out[part.offset..part.offset + part.form.bytes()];
            if placed.is_empty() {
                placed = self.sample.placements();
            }
            let kind = field.kind.targets().expect("read as targets above");
            // A field of views holds one copy of the targets a view, each placed by
            // its view's geometry.
            let each: Vec<(usize, &PartForm)> = match &part.form {
                PartForm::Views { views } => views.iter().map(|(at, f)| (*at, f)).collect(),
                form => vec![(0, form)],
            };
            if placed.len() != each.len() {
                return Err(Cause::Internal(format!(
                    "field {:?} follows {} placements of its sample, and the sample was \
                     placed {} times",
                    field.name,
                    each.len(),
                    placed.len()
                )));
            }
            for ((at, form), placement) in each.into_iter().zip(&placed) {
                let view = &mut slot[at..at + form.bytes()];
                kind.write(&field.name, &read, placement, view)?;
            }
        }
        Ok(prepared)
    }

    /// The record's: its first field of the loader's modality is prepared first, and
    /// is what keeps something by it (a second one is prepared without it).
    fn next_sample(&mut self, id: SampleId) {
        self.sample.next_sample(id);
    }
}

/// The data of the record's member for `field`: of its first extension the record has.
///
/// The record's sample field (`record_sample`: the first field of the loader's modality)
/// also finds the member named by its modality (`image`, `audio`): a record
/// that is not a tar run (a Parquet row, a manifest's segment, a file and its sidecars)
/// names its sample so, whatever its file's extension or column's name.
pub(super) fn member<'a>(
    data: &'a [u8],
    members: &[RecordMember],
    field: &Field,
    record_sample: Option<Modality>,
) -> Result<&'a [u8], Cause> {
    let own = record_sample.map(Modality::name);
    let found = field
        .members
        .iter()
        .map(String::as_str)
        .chain(own)
        .find_map(|ext| members.iter().find(|m| m.ext.eq_ignore_ascii_case(ext)));
    let member = found.ok_or_else(|| Cause::MissingField {
        field: field.name.clone(),
        members: field.members.join(";"),
    })?;
    // `members` checked every extent against the record.
    Ok(&data[member.data.clone()])
}
