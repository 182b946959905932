//! The kinds of field, one file each: a type implementing [`Kind`] (its form in a slot,
//! its fingerprint, the bounds it holds its settings to, how it prepares its member into
//! its slot, its settings as another process is sent them), its [`Declaration`] (its
//! name, the extensions it is the kind of, the settings it is made of) and the
//! [`FieldKind`] constructor a Rust caller makes it with.
//!
//! Adding a kind is its file here, its line in [`KINDS`], its test and its line in the
//! fields guide (docs/python.md). Python's `Field(kind=...)` and the node agent's
//! portable fields find it by its name and make it of its settings by theirs; a setting
//! no kind took before is also a keyword of Python's `Field`.

#[cfg(feature = "video")]
mod audio;
mod boxes;
mod bytes;
mod json;
mod label;
mod mask;
mod npz;
mod sample;
mod settings;
mod text;
#[cfg(feature = "tokenize")]
pub(super) mod tokens;
mod var;
pub(super) mod vector;

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use serde_json::{Map, Value};

pub(super) use settings::Settings;

use crate::error::{Cause, Error, Result};
use crate::prep::image::Placement;
use crate::sample::{Modality, PartForm, SampleLayout};
use crate::storage::SubColumns;

/// Every kind, by name: what Python's `Field(kind=...)` and the portable text name.
const KINDS: &[&Declaration] = &[
    &sample::DECLARATION,
    &label::DECLARATION,
    &text::DECLARATION,
    &json::DECLARATION,
    &bytes::DECLARATION,
    #[cfg(feature = "tokenize")]
    &tokens::DECLARATION,
    &vector::DECLARATION,
    &npz::DECLARATION,
    &boxes::DECLARATION,
    &mask::DECLARATION,
    #[cfg(feature = "video")]
    &audio::DECLARATION,
];

/// What a kind is to the rest of the engine: its name, where its bytes come from, and
/// how it is made.
pub(super) struct Declaration {
    /// Its name: `Field(kind=...)`'s and the portable text's.
    name: &'static str,
    /// The extensions (lower case) it is the kind of, unless a field says otherwise.
    extensions: &'static [&'static str],
    /// The settings it is made of: any other is refused.
    settings: &'static [&'static str],
    /// It, made of its settings (absent ones take their defaults).
    make: fn(&mut Settings<'_>) -> std::result::Result<FieldKind, String>,
}

/// Where a field's bytes come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// The loader's pipeline prepares its member.
    Sample,
    /// The sample's label, read when the shards are indexed: nothing in the slot.
    Label,
    /// Its kind prepares its member ([`Kind::prepare`]).
    Member,
    /// Its kind prepares its member following the sample's geometry
    /// ([`Kind::prepare_placed`]): after the sample.
    Target,
    /// Its kind prepares the sample's video member over the spans of the clips the
    /// sample holds ([`Kind::prepare_spanned`]): after the sample.
    Spans,
}

/// One kind of field: how it is held in a slot and how its member is prepared there.
pub(super) trait Kind: Any + fmt::Debug + Send + Sync {
    /// Its declaration.
    fn declaration(&self) -> &'static Declaration;

    /// Where its bytes come from.
    fn role(&self) -> Role {
        Role::Member
    }

    /// Whether its settings are within their bounds for a field read from `members`, in
    /// words if not (what [`Fields::new`](super::Fields::new) refuses).
    fn check(&self, _members: &[String]) -> std::result::Result<(), String> {
        Ok(())
    }

    /// Its form in a slot, given the layout of the loader's pipeline.
    fn form(&self, sample: &SampleLayout) -> PartForm;

    /// What changes the field's output, for the loader's fingerprint.
    fn fingerprint(&self) -> String;

    /// Prepares `member`, the record's member for field `field`, into the field's `slot`
    /// (of [`Kind::form`]'s bytes). The member's size is compared with the kind's bound
    /// before anything of it is read, and what reads it allocates nothing sized by it.
    ///
    /// # Errors
    ///
    /// The sample's [`Cause`], naming `field`.
    fn prepare(&self, field: &str, member: &[u8], slot: &mut [u8]) -> Result<(), Cause>;

    /// It as targets that follow the sample's geometry, for a kind of [`Role::Target`].
    fn targets(&self) -> Option<&dyn TargetKind> {
        None
    }

    /// The lists it reads of a column that is a struct of lists (a Parquet dataset's),
    /// for a kind that reads one: a Parquet dataset then hands it each row's lists as
    /// one member ([`crate::storage::encode_lists_member`]).
    fn sub_columns(&self) -> Option<SubColumns> {
        None
    }

    /// Prepares `member`, the sample's video, over `spans` (one a clip of the sample, in
    /// its order) into the field's `slot`, for a kind of [`Role::Spans`].
    ///
    /// # Errors
    ///
    /// The sample's [`Cause`], naming `field`.
    #[cfg(feature = "video")]
    fn prepare_spanned(
        &self,
        field: &str,
        _member: &[u8],
        _spans: &[nostall_video::Span],
        _slot: &mut [u8],
    ) -> Result<(), Cause> {
        Err(Cause::Internal(format!(
            "field {field:?} does not follow the sample's clips"
        )))
    }

    /// Its settings as the portable text sends them ([`Declaration::make`] reads them
    /// back), adding any tokenizer it names to `tokenizers`.
    fn settings(&self, tokenizers: &mut Vec<Arc<[u8]>>) -> Map<String, Value>;
}

/// A sample's targets as a target field read them ([`TargetKind::read`]), before the
/// sample is placed.
#[derive(Debug)]
pub(crate) enum Targets {
    /// A boxes field's.
    Boxes(boxes::BoxTargets),
    /// A mask field's label map.
    Map(mask::LabelMap),
}

impl Targets {
    /// The boxes' corners (x0, y0, x1, y1 in source pixels), what the geometry's draws
    /// read; `None` for targets without boxes.
    pub(crate) fn corners(&self) -> Option<Vec<[f64; 4]>> {
        match self {
            Targets::Boxes(boxes) => Some(boxes.corners()),
            Targets::Map(_) => None,
        }
    }
}

/// What a target field's [`Kind::prepare`] gives: it is prepared by its [`TargetKind`],
/// with the sample's placement, never alone.
fn prepared_unplaced(field: &str) -> Cause {
    Cause::Internal(format!(
        "field {field:?} follows the sample's geometry and was prepared without it"
    ))
}

/// What a [`TargetKind::write`] gives for targets another kind read.
fn targets_of_another_kind(field: &str) -> Cause {
    Cause::Internal(format!("field {field:?} was given another kind's targets"))
}

/// A kind whose member follows the sample's geometry ([`Role::Target`]): read before the
/// sample is prepared (its boxes are what some operators draw against), written after it,
/// by the sample's [`Placement`].
pub(super) trait TargetKind {
    /// Whether its targets can be made for a pipeline whose output is `(width, height)`,
    /// in words if not (what the loader refuses when it is built).
    fn fits(&self, _output: (usize, usize)) -> std::result::Result<(), String> {
        Ok(())
    }

    /// The targets of `member`, for field `field`.
    ///
    /// # Errors
    ///
    /// The sample's [`Cause`], naming `field`.
    fn read(&self, field: &str, member: &[u8]) -> Result<Targets, Cause>;

    /// Writes `targets` into `slot`, placed by `placement`.
    ///
    /// # Errors
    ///
    /// The sample's [`Cause`], naming `field` (targets made for an image of another size).
    fn write(
        &self,
        field: &str,
        targets: &Targets,
        placement: &Placement,
        slot: &mut [u8],
    ) -> Result<(), Cause>;
}

/// How a field is prepared: the loader's pipeline, the label, text, JSON, bytes, tokens,
/// a vector of numbers, arrays of an `.npz` archive. Made by a constructor of its kind
/// ([`FieldKind::text`]…), by name with its settings ([`FieldKind::made`]), or by a
/// member's extension ([`FieldKind::for_extension`]).
#[derive(Clone)]
pub struct FieldKind(Arc<dyn Kind>);

impl fmt::Debug for FieldKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FieldKind {
    fn of(kind: impl Kind) -> FieldKind {
        FieldKind(Arc::new(kind))
    }

    /// The kind webdataset's decoders give a member of extension `ext`: the loader's
    /// modality's own (`jpg`, `wav`…, or its name: a manifest's `audio`) through its
    /// pipeline, `cls` (or a manifest's `label`) the label, `txt`, `text` (and the
    /// usual names of text columns: `caption`, `transcript`, `sentence`) text, `json`
    /// JSON, `npz` arrays (which the field must name), anything else bytes; each with
    /// its settings' defaults.
    pub fn for_extension(ext: &str, modality: Modality) -> FieldKind {
        let declared = declared_for(ext, modality);
        // A kind declared for extensions is made of its settings' defaults (a test holds
        // each to it): an npz field's arrays default to none, which `Fields::new` refuses.
        (declared.make)(&mut Settings::default()).unwrap_or_else(|why| {
            unreachable!("kind {:?} made of no settings: {why}", declared.name)
        })
    }

    /// The kind named `kind`, made of `settings` (by name, as Python's `Field` takes
    /// them: `max_bytes`, `keys`, `length`, `arrays` as `[[name, [dims...]], ...]`),
    /// for field `field`; without `kind`, the kind of `members`' first extension
    /// ([`FieldKind::for_extension`]) with those settings.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the field: an unknown kind, a setting the kind does not
    /// take, a setting that is not what the kind reads, one it needs and lacks.
    pub fn made(
        field: &str,
        kind: Option<&str>,
        members: &[String],
        modality: Modality,
        settings: Map<String, Value>,
    ) -> Result<FieldKind> {
        let name = match kind {
            Some(kind) => kind,
            None => {
                let first = members.first().map_or("", String::as_str);
                declared_for(first, modality).name
            }
        };
        made(name, &mut Settings::new(settings))
            .map_err(|why| Error::Config(format!("field {field:?}: {why}")))
    }

    /// Its name: `Field(kind=...)`'s.
    pub fn name(&self) -> &'static str {
        self.0.declaration().name
    }

    /// Its form in a slot, given the layout of the loader's pipeline.
    pub fn form(&self, sample: &SampleLayout) -> PartForm {
        self.0.form(sample)
    }

    /// Where its bytes come from ([`Kind::role`]).
    pub(super) fn role(&self) -> Role {
        self.0.role()
    }

    /// The lists it reads of a struct column ([`Kind::sub_columns`]).
    pub(super) fn sub_columns(&self) -> Option<SubColumns> {
        self.0.sub_columns()
    }

    /// Whether its settings are within their bounds ([`Kind::check`]).
    pub(super) fn check(&self, members: &[String]) -> std::result::Result<(), String> {
        self.0.check(members)
    }

    /// What changes its output ([`Kind::fingerprint`]).
    pub(super) fn fingerprint(&self) -> String {
        self.0.fingerprint()
    }

    /// Prepares `member` into `slot` ([`Kind::prepare`]).
    pub(super) fn prepare(&self, field: &str, member: &[u8], slot: &mut [u8]) -> Result<(), Cause> {
        self.0.prepare(field, member, slot)
    }

    /// Prepares the sample's video `member` over the clips' `spans` into `slot`
    /// ([`Kind::prepare_spanned`]).
    #[cfg(feature = "video")]
    pub(super) fn prepare_spanned(
        &self,
        field: &str,
        member: &[u8],
        spans: &[nostall_video::Span],
        slot: &mut [u8],
    ) -> Result<(), Cause> {
        self.0.prepare_spanned(field, member, spans, slot)
    }

    /// It as targets, for a kind of [`Role::Target`] ([`Kind::targets`]).
    pub(super) fn targets(&self) -> Option<&dyn TargetKind> {
        self.0.targets()
    }

    /// Its settings for the portable text ([`Kind::settings`]).
    pub(super) fn settings(&self, tokenizers: &mut Vec<Arc<[u8]>>) -> Map<String, Value> {
        self.0.settings(tokenizers)
    }

    /// It as kind `K`, if it is one (the tokens' test looks into a field).
    #[cfg(all(test, feature = "tokenize"))]
    pub(super) fn get<K: Kind>(&self) -> Option<&K> {
        (&*self.0 as &dyn Any).downcast_ref()
    }
}

/// The declaration of the kind of a member of extension `ext`.
fn declared_for(ext: &str, modality: Modality) -> &'static Declaration {
    let ext = ext.to_ascii_lowercase();
    if ext == modality.name() || modality.accepts(&format!("x.{ext}")) {
        return &sample::DECLARATION;
    }
    KINDS
        .iter()
        .find(|d| d.extensions.contains(&ext.as_str()))
        .copied()
        .unwrap_or(&bytes::DECLARATION)
}

/// The kind named `name`, made of `settings`, or what is wrong in words.
pub(super) fn made(
    name: &str,
    settings: &mut Settings<'_>,
) -> std::result::Result<FieldKind, String> {
    #[cfg(not(feature = "tokenize"))]
    if name == "tokens" {
        return Err(
            "it is tokenized, and this build has no tokenizer (the `tokenize` feature)".into(),
        );
    }
    #[cfg(not(feature = "video"))]
    if name == "audio" {
        return Err(
            "it is a video's audio track, and this build decodes no video (the `video` \
             feature)"
                .into(),
        );
    }
    let declared = KINDS.iter().find(|d| d.name == name).ok_or_else(|| {
        let names: Vec<String> = KINDS.iter().map(|d| format!("{:?}", d.name)).collect();
        let (last, others) = names.split_last().expect("kinds are declared");
        format!("unknown kind {name:?}: use {} or {last}", others.join(", "))
    })?;
    if let Some(other) = settings.names().find(|s| !declared.settings.contains(s)) {
        let takers: Vec<String> = KINDS
            .iter()
            .filter(|d| d.settings.contains(&other))
            .map(|d| format!("{:?}", d.name))
            .collect();
        return Err(match takers.as_slice() {
            [] => format!("{other}= is no kind's setting"),
            takers => format!(
                "{other}= is not a setting of kind {name:?} (it is of kind {})",
                takers.join(" or ")
            ),
        });
    }
    (declared.make)(settings)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::sample::DType;

    fn settings(values: Value) -> Settings<'static> {
        let Value::Object(values) = values else {
            panic!("settings are an object")
        };
        Settings::new(values)
    }

    #[test]
    fn each_kind_is_made_again_of_the_settings_it_sends() {
        let names: Vec<&str> = KINDS.iter().map(|d| d.name).collect();
        let mut unique = names.clone();
        unique.dedup();
        assert_eq!(names, unique);
        // What `FieldKind::for_extension` relies on.
        for declared in KINDS.iter().filter(|d| !d.extensions.is_empty()) {
            assert!(
                (declared.make)(&mut Settings::default()).is_ok(),
                "{}",
                declared.name
            );
        }
        let layout = SampleLayout::new(vec![3, 4, 4], DType::F32);
        let kinds = [
            FieldKind::sample(),
            FieldKind::label(),
            FieldKind::text(9),
            FieldKind::json(7, vec!["w".into()]),
            FieldKind::bytes(5),
            FieldKind::vector(3),
            FieldKind::npz(vec![("a".into(), vec![2, 3]), ("b".into(), vec![])]),
            FieldKind::boxes(7, "cxcywh").unwrap(),
            #[cfg(feature = "video")]
            FieldKind::audio(16_000, 2, 800),
        ];
        for kind in kinds {
            let sent = kind.settings(&mut Vec::new());
            let again = made(kind.name(), &mut Settings::new(sent)).unwrap();
            assert_eq!(again.fingerprint(), kind.fingerprint());
            assert_eq!(again.form(&layout), kind.form(&layout));
        }
    }

    #[test]
    fn unknown_kinds_and_settings_are_refused_naming_what_takes_them() {
        let why = |name: &str, values: Value| made(name, &mut settings(values)).unwrap_err();
        // The tokens' kind exists where the tokenizer is built.
        let tokens = if cfg!(feature = "tokenize") {
            "\"tokens\", "
        } else {
            ""
        };
        let last = if cfg!(feature = "video") {
            "\"mask\" or \"audio\""
        } else {
            "\"boxes\" or \"mask\""
        };
        let boxes = if cfg!(feature = "video") {
            "\"boxes\", "
        } else {
            ""
        };
        assert_eq!(
            why("picture", json!({})),
            format!(
                "unknown kind \"picture\": use \"sample\", \"label\", \"text\", \"json\", \
                 \"bytes\", {tokens}\"vector\", \"npz\", {boxes}{last}"
            )
        );
        let takers = match (cfg!(feature = "tokenize"), cfg!(feature = "video")) {
            (true, true) => "\"tokens\" or \"vector\" or \"audio\"",
            (true, false) => "\"tokens\" or \"vector\"",
            (false, true) => "\"vector\" or \"audio\"",
            (false, false) => "\"vector\"",
        };
        assert_eq!(
            why("text", json!({ "length": 3 })),
            format!("length= is not a setting of kind \"text\" (it is of kind {takers})")
        );
        assert_eq!(
            why("bytes", json!({ "colour": 1 })),
            "colour= is no kind's setting"
        );
        assert!(why("vector", json!({})).contains("give length="));
        assert_eq!(
            why("text", json!({ "max_bytes": -1 })),
            "max_bytes=-1 is not a whole number"
        );
        assert!(why("json", json!({ "keys": [1] })).contains("not a list of text"));
        assert!(why("npz", json!({ "arrays": { "a": 3 } })).contains("not a list"));
        assert!(why("npz", json!({ "arrays": [["a", [-1]]] })).contains("not a list"));
        if cfg!(feature = "tokenize") {
            assert!(why("tokens", json!({})).contains("given its tokenizer"));
        }
        let kind = made("npz", &mut settings(json!({ "arrays": [["a", [2, 3]]] }))).unwrap();
        assert_eq!(kind.fingerprint(), r#"npz [("a", [2, 3])]"#);
    }

    #[test]
    fn a_kind_is_found_by_its_members_extension_with_the_settings_given() {
        let made = |members: &str, values: Value| {
            let Value::Object(values) = values else {
                unreachable!()
            };
            FieldKind::made("f", None, &[members.into()], Modality::Image, values)
        };
        assert_eq!(
            made("npz", json!({ "arrays": [["a", [2]]] }))
                .unwrap()
                .name(),
            "npz"
        );
        assert_eq!(
            made("caption", json!({ "max_bytes": 9 }))
                .unwrap()
                .fingerprint(),
            "text 9"
        );
        assert_eq!(made("jpg", json!({})).unwrap().name(), "sample");
        let why = made("npy", json!({ "length": 3 })).unwrap_err().to_string();
        assert!(
            why.contains("field \"f\": length= is not a setting of kind \"bytes\""),
            "{why}"
        );
        assert_eq!(
            FieldKind::for_extension("NPZ", Modality::Image).name(),
            "npz"
        );
        assert_eq!(
            FieldKind::for_extension("wav", Modality::Audio).name(),
            "sample"
        );
    }
}
