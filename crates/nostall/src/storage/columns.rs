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
