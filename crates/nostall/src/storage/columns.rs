//! Which columns of a Parquet dataset (or members of a WebDataset record) a job reads, as
//! it names them: the settings' part that the sources resolve against each file.

use crate::error::{Error, Result};

/// Which columns of a Parquet dataset hold the samples and the labels (other formats
/// ignore it). Default: found by the files' Hugging Face features, else by their usual
/// names.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Columns {
    /// The column of encoded samples (`sample_column`): binary, or a struct whose `bytes`
    /// field is. `None`: the `Image` (or `Audio`) feature, else a column named `image`,
    /// `img`, `jpg`… (`audio`, `wav`, `flac`…).
    pub sample: Option<String>,
    /// The labels (`label_column`).
    pub label: LabelColumn,
    /// For a loader given fields, the members each sample is read with as a record: for
    /// each field other than the sample's and the label, the members it may be read from
    /// in order of preference (WebDataset extensions such as `txt`, Parquet columns,
    /// sidecar extensions; [`Fields::others`](crate::fields::Fields::others)); `None`:
    /// the sample alone.
    pub record: Option<Vec<Vec<String>>>,
    /// Beside [`Columns::record`], field by field: how the field reads a column that is
    /// a struct of lists (Hugging Face's `Sequence` of a dict, as detection datasets
    /// store their targets), for a field that reads one (a boxes field); empty, or
    /// `None` for a field: such a column is refused for it.
    pub sub_columns: Vec<Option<SubColumns>>,
}

/// Which lists of a struct column a field reads, and how many values it takes of a row
/// ([`Columns::sub_columns`]): a Parquet dataset hands the field each row's lists as one
/// member ([`encode_lists_member`](crate::storage::encode_lists_member)), in this order.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SubColumns {
    /// Each list read, by its names in order of preference (`bbox`, `boxes`): the
    /// struct's first field of one of them.
    pub lists: Vec<Vec<String>>,
    /// The most values a row's list may hold (a boxes field's `max_boxes` boxes of four
    /// numbers): a row holding more is handed the field as too many, not read.
    pub most: usize,
    /// Why the field, as it is set, cannot read a struct column (a setting it needs for
    /// one is missing), in words: a dataset whose column is one is refused with it.
    pub refused: Option<String>,
}

impl SubColumns {
    /// Reads `lists`, each by its names in order of preference, taking at most `most`
    /// values of each list a row; `refused`: why the field cannot read them as set.
    pub fn new(lists: Vec<Vec<String>>, most: usize, refused: Option<String>) -> SubColumns {
        SubColumns {
            lists,
            most,
            refused,
        }
    }
}

/// Where a Parquet dataset's labels are.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum LabelColumn {
    /// The `ClassLabel` feature, else a column named `label`, `labels` or `cls`, else
    /// none (`auto`).
    #[default]
    Auto,
    /// No labels: the dataset is read unlabeled (`none`).
    Unlabeled,
    /// This column: class numbers (integers) or class names (strings, numbered in sorted
    /// order).
    Named(String),
}

impl std::str::FromStr for LabelColumn {
    type Err = Error;

    /// `auto`, `none`, or a column's name.
    fn from_str(s: &str) -> Result<LabelColumn> {
        Ok(match s {
            "" => {
                return Err(Error::Config(
                    "label_column=\"\": give a column's name, auto or none".into(),
                ))
            }
            "auto" => LabelColumn::Auto,
            "none" => LabelColumn::Unlabeled,
            name => LabelColumn::Named(name.to_string()),
        })
    }
}

impl std::fmt::Display for LabelColumn {
    /// The text its `FromStr` reads.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LabelColumn::Auto => "auto",
            LabelColumn::Unlabeled => "none",
            LabelColumn::Named(name) => name,
        })
    }
}
