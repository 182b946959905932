//! Which columns of a Parquet file hold the samples and their labels: named by the user,
//! described by the file's `huggingface` metadata, or found by their usual names.

use parquet::basic::Type as PhysicalType;
use parquet::file::metadata::FileMetaData;
use parquet::schema::types::ColumnDescPtr;

use crate::sample::Modality;
use crate::storage::{Columns, LabelColumn};

/// The leaf columns a dataset reads, found in one file.
#[derive(Debug, Clone)]
pub(super) struct Found {
    /// The column of each row's encoded sample (a `BYTE_ARRAY`), by leaf index.
    pub(super) sample: usize,
    /// The column of each row's label, if the dataset is labeled.
    pub(super) label: Option<Label>,
    /// The class names the file's metadata gives (`ClassLabel`), in label order.
    pub(super) names: Vec<String>,
}

/// A label column and how its values read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Label {
    /// Its leaf index.
    pub(super) leaf: usize,
    /// Whether its values are class numbers (`INT32`, `INT64`) or class names (strings).
    pub(super) numbered: bool,
}

/// Column names a sample column of `modality` usually has, when nothing says which.
fn usual_sample_names(modality: Modality) -> &'static [&'static str] {
    match modality {
        Modality::Image => &["image", "img", "jpg", "jpeg", "png"],
        Modality::Audio => &["audio", "wav", "flac", "mp3", "ogg", "opus"],
        Modality::Video => &["video", "mp4", "webm", "mkv", "avi", "mov"],
    }
}

/// The `_type` of a Hugging Face feature of `modality`.
fn feature_type(modality: Modality) -> &'static str {
    match modality {
        Modality::Image => "Image",
        Modality::Audio => "Audio",
        Modality::Video => "Video",
    }
}

/// The dataset's features as the `huggingface` key of the file's metadata describes them
/// (`{"info": {"features": {...}}}`), in column order; empty without them.
fn features(meta: &FileMetaData) -> Vec<(String, serde_json::Value)> {
    let Some(text) = meta
        .key_value_metadata()
        .and_then(|kv| kv.iter().find(|kv| kv.key == "huggingface"))
        .and_then(|kv| kv.value.as_deref())
    else {
        return Vec::new();
    };
    let Ok(serde_json::Value::Object(root)) = serde_json::from_str(text) else {
        return Vec::new();
    };
    let features = root
        .get("info")
        .and_then(|info| info.get("features"))
        .or_else(|| root.get("features"));
    match features {
        Some(serde_json::Value::Object(map)) => {
            map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        }
        _ => Vec::new(),
    }
}

/// Finds the sample and label columns of a file with metadata `meta`, as `columns` asks.
/// The error says what the file has and what to give instead.
pub(super) fn find(
    meta: &FileMetaData,
    modality: Modality,
    columns: &Columns,
) -> std::result::Result<Found, String> {
    let schema = meta.schema_descr();
    let leaves: Vec<ColumnDescPtr> = (0..schema.num_columns())
        .map(|i| schema.column(i))
        .collect();
    let features = features(meta);
    let typed = |name: &str| {
        features
            .iter()
            .find(|(_, f)| f.get("_type").and_then(|t| t.as_str()) == Some(name))
            .map(|(column, feature)| (column.clone(), feature.clone()))
    };
    let top_level: Vec<&str> = {
        let mut names: Vec<&str> = leaves
            .iter()
            .map(|l| l.path().parts()[0].as_str())
            .collect();
        names.dedup();
        names
    };
    let sample_name = match &columns.sample {
        Some(name) => name.clone(),
        None => match typed(feature_type(modality)) {
            Some((column, _)) => column,
            None => usual_sample_names(modality)
                .iter()
                .find(|usual| top_level.contains(usual))
                .map(|usual| usual.to_string())
                .ok_or_else(|| {
                    format!(
                        "no column holds {} (its columns: {}); name it with sample_column=",
                        modality.plural(),
                        top_level.join(", ")
                    )
                })?,
        },
    };
    let sample = sample_leaf(&leaves, &sample_name)?;
    let class_label = typed("ClassLabel");
    let label_name = match &columns.label {
        LabelColumn::Unlabeled => None,
        LabelColumn::Named(name) => Some(name.clone()),
        LabelColumn::Auto => class_label.as_ref().map(|(c, _)| c.clone()).or_else(|| {
            ["label", "labels", "cls"]
                .iter()
                .find(|usual| top_level.contains(usual))
                .map(|usual| usual.to_string())
        }),
    };
    let label = match &label_name {
        Some(name) => Some(label_leaf(&leaves, name)?),
        None => None,
    };
    let names = match (&class_label, &label_name) {
        (Some((column, feature)), Some(label)) if column == label => feature
            .get("names")
            .and_then(|n| n.as_array())
            .map(|names| {
                names
                    .iter()
                    .map(|n| n.as_str().map_or_else(|| n.to_string(), str::to_string))
                    .collect()
            })
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    Ok(Found {
        sample,
        label,
        names,
    })
}

/// The leaf of column `name` that holds encoded samples: the column itself if it is
/// binary, or its `bytes` field (the `{bytes, path}` struct of Hugging Face's `Image` and
/// `Audio` features).
pub(super) fn sample_leaf(
    leaves: &[ColumnDescPtr],
    name: &str,
) -> std::result::Result<usize, String> {
    let found = leaves
        .iter()
        .position(|l| l.path().parts() == [name])
        .or_else(|| {
            leaves
                .iter()
                .position(|l| l.path().parts() == [name, "bytes"])
        })
        .ok_or_else(|| {
            if leaves.iter().any(|l| l.path().parts()[0] == name) {
                format!(
                    "column {name:?} is neither binary nor a struct with a `bytes` field, so \
                     it holds no encoded samples"
                )
            } else {
                format!("there is no column {name:?}")
            }
        })?;
    let leaf = &leaves[found];
    if leaf.physical_type() != PhysicalType::BYTE_ARRAY {
        return Err(format!(
            "column {} holds {:?} values, not the bytes of encoded samples",
            leaf.path(),
            leaf.physical_type()
        ));
    }
    if leaf.max_rep_level() > 0 {
        return Err(format!(
            "column {} is a list (nested), not one sample per row",
            leaf.path()
        ));
    }
    Ok(found)
}

/// The leaf of label column `name`: class numbers or class names, one per row.
fn label_leaf(leaves: &[ColumnDescPtr], name: &str) -> std::result::Result<Label, String> {
    let leaf = leaves
        .iter()
        .position(|l| l.path().parts() == [name])
        .ok_or_else(|| {
            if leaves.iter().any(|l| l.path().parts()[0] == name) {
                format!("label column {name:?} is nested; a label is one number or name per row")
            } else {
                format!("there is no label column {name:?} (give label_column=none for none)")
            }
        })?;
    let descr = &leaves[leaf];
    if descr.max_rep_level() > 0 {
        return Err(format!(
            "label column {name:?} is a list; a label is one number or name per row"
        ));
    }
    let numbered = match descr.physical_type() {
        PhysicalType::INT32 | PhysicalType::INT64 => true,
        PhysicalType::BYTE_ARRAY => false,
        other => {
            return Err(format!(
                "label column {name:?} holds {other:?} values; a label is a class number \
                 (an integer) or a class name (a string)"
            ))
        }
    };
    Ok(Label { leaf, numbered })
}
