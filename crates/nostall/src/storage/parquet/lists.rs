//! A struct column's lists, row by row: Hugging Face's `Sequence` of a dict (a detection
//! dataset's `objects: {id: [...], bbox: [[...], ...], category: [...]}`), stored as one
//! leaf column a list, each a list of numbers or of lists of numbers.
//!
//! A leaf column of lists is stored flat: its values, and beside each a repetition level
//! (0: the value begins a row; k: it continues the row's lists down to level k and
//! begins a new element there) and a definition level (how deep its path is there: a
//! null list, an empty one, a null value, a value). The decoder reads them
//! ([`super::chunk::lists`]); [`assemble`] makes each row's list of them, as the levels'
//! marks for the column say ([`Marks`]), never holding more of a row than the field
//! takes.

use parquet::basic::{Repetition, Type as PhysicalType};
use parquet::schema::types::{ColumnDescPtr, Type};

use crate::storage::Item;

/// The deepest lists read: a list of boxes, each a list of four numbers.
const MAX_DEPTH: usize = 2;

/// Where a column's lists begin in its definition levels: for each list, from the
/// outermost, the level at which it is there (below: it or what holds it is null) and
/// the level at which it has an element (below: it is empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Marks {
    lists: Vec<(i16, i16)>,
}

impl Marks {
    /// The marks of leaf column `path` under its top-level field `root`, found by walking
    /// the schema as the writer nests the levels: an optional field adds a definition
    /// level, a repeated one a definition and a repetition level.
    pub(super) fn of(root: &Type, path: &[String]) -> Result<Marks, String> {
        let (mut def, mut lists) = (0i16, Vec::new());
        let mut node = root;
        for (i, part) in path.iter().enumerate() {
            if i > 0 {
                node = node
                    .get_fields()
                    .iter()
                    .find(|f| f.name() == part)
                    .map(|f| &**f)
                    .ok_or_else(|| format!("column {} is not in the schema", path.join(".")))?;
            }
            let info = node.get_basic_info();
            if info.has_repetition() {
                match info.repetition() {
                    Repetition::OPTIONAL => def += 1,
                    Repetition::REPEATED => {
                        lists.push((def, def + 1));
                        def += 1;
                    }
                    Repetition::REQUIRED => {}
                }
            }
        }
        Ok(Marks { lists })
    }

    /// How deep the lists nest (1: a list of numbers; 2: a list of lists).
    pub(super) fn depth(&self) -> usize {
        self.lists.len()
    }

    /// The item a row's list at `level` begins as, at definition level `def`: null,
    /// empty, or holding its first element.
    fn begin(&self, level: usize, def: i16, value: Option<Item>) -> Item {
        let (there, element) = self.lists[level];
        if def < there {
            Item::Null
        } else if def < element {
            Item::List(Vec::new())
        } else {
            Item::List(vec![self.element(level, def, value)])
        }
    }

    /// An element of the list at `level`: the value (null where the level says), or the
    /// list it holds.
    fn element(&self, level: usize, def: i16, value: Option<Item>) -> Item {
        match level + 1 == self.lists.len() {
            true => value.unwrap_or(Item::Null),
            false => self.begin(level + 1, def, value),
        }
    }
}

/// The leaf of the struct column `column`'s list `names` (its first field of one of
/// these names): a list, or a list of lists, of integers or floating-point numbers. The
/// struct may itself be a list of structs (`datasets`' `List` of a dict).
pub(super) fn sub_leaf(
    leaves: &[ColumnDescPtr],
    column: &str,
    names: &[String],
) -> Result<usize, String> {
    // `column.name`, or `column.list.element.name` in a list of structs.
    let under = |parts: &[String], name: &str| match parts {
        [top, list, element, sub, ..]
            if list == "list" && (element == "element" || element == "item") =>
        {
            top == column && sub == name
        }
        [top, sub, ..] => top == column && sub == name,
        _ => false,
    };
    for name in names {
        let found: Vec<usize> = (0..leaves.len())
            .filter(|&i| under(leaves[i].path().parts(), name))
            .collect();
        let &[leaf] = found.as_slice() else {
            if found.is_empty() {
                continue;
            }
            return Err(format!(
                "{column}.{name} is a struct of {} columns, not a list of numbers",
                found.len()
            ));
        };
        let descr = &leaves[leaf];
        if !matches!(
            descr.physical_type(),
            PhysicalType::INT32 | PhysicalType::INT64 | PhysicalType::FLOAT | PhysicalType::DOUBLE
        ) {
            return Err(format!(
                "{} holds {:?} values, not numbers",
                descr.path(),
                descr.physical_type()
            ));
        }
        let depth = descr.max_rep_level() as usize;
        if depth == 0 || depth > MAX_DEPTH {
            return Err(format!(
                "{} is nested {depth} lists deep: a list of numbers, or of lists of \
                 numbers, is read",
                descr.path()
            ));
        }
        return Ok(leaf);
    }
    let mut fields: Vec<&str> = leaves
        .iter()
        .filter_map(|l| {
            let parts = l.path().parts();
            (parts.len() > 1 && parts[0] == column).then(|| {
                // A list of structs names its fields under `list.element`.
                let at = match parts.len() > 3 && parts[1] == "list" {
                    true => 3,
                    false => 1,
                };
                parts[at].as_str()
            })
        })
        .collect();
    fields.dedup();
    Err(format!(
        "column {column:?} has no list {} (its fields: {})",
        names
            .iter()
            .map(|n| format!("{n:?}"))
            .collect::<Vec<_>>()
            .join(" or "),
        fields.join(", ")
    ))
}

/// Each of `rows` rows' list, from a column's levels and values (`values`: one for each
/// definition level of `max_def`), nested as `marks` says: [`Item::TooMany`] for a row
/// of more than `most` levels, whose values are passed over.
///
/// # Errors
///
/// Levels that do not make `rows` rows of lists (damage), in words.
pub(super) fn assemble(
    defs: &[i16],
    reps: &[i16],
    values: Vec<Item>,
    rows: usize,
    max_def: i16,
    marks: &Marks,
    most: usize,
) -> Result<Vec<Item>, String> {
    if marks.depth() == 0 {
        return Err("a column of no lists".into());
    }
    if reps.len() != defs.len() {
        return Err(format!(
            "{} repetition levels and {} definition levels",
            reps.len(),
            defs.len()
        ));
    }
    let damage = |i: usize, why: &str| format!("level {i}: {why}");
    let mut out: Vec<Item> = Vec::with_capacity(rows);
    let mut values = values.into_iter();
    let mut held = 0usize;
    for (i, (&rep, &def)) in reps.iter().zip(defs).enumerate() {
        if def < 0 || def > max_def || rep < 0 || rep as usize > marks.depth() {
            return Err(damage(i, &format!("repetition {rep}, definition {def}")));
        }
        let value = match def == max_def {
            true => Some(values.next().ok_or("fewer values than levels")?),
            false => None,
        };
        if rep == 0 {
            out.push(marks.begin(0, def, value));
            held = 1;
            continue;
        }
        let row = out
            .last_mut()
            .ok_or_else(|| damage(i, "a column's first level continues a row"))?;
        held += 1;
        if let Item::TooMany(count) = row {
            *count += 1;
            continue;
        }
        if held > most {
            *row = Item::TooMany(held as u64);
            continue;
        }
        // The list this level continues: the last element's, down to level `rep`.
        let mut list = row;
        for _ in 1..rep {
            list = match list {
                Item::List(items) => items
                    .last_mut()
                    .ok_or_else(|| damage(i, "it continues an empty list"))?,
                _ => return Err(damage(i, "it continues a null list")),
            };
        }
        match list {
            Item::List(items) => items.push(marks.element(rep as usize - 1, def, value)),
            _ => return Err(damage(i, "it continues a null list")),
        }
    }
    if values.next().is_some() {
        return Err("more values than levels".into());
    }
    match out.len() == rows {
        true => Ok(out),
        false => Err(format!(
            "{} rows of lists where the footer declares {rows}",
            out.len()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A list of lists, each level optional (as pyarrow writes `list<list<float>>`):
    /// the list there (1), an element (2), the inner list there (3), an element (4), a
    /// value (5).
    fn nested() -> Marks {
        Marks {
            lists: vec![(1, 2), (3, 4)],
        }
    }

    fn f(v: f64) -> Item {
        Item::Float(v)
    }

    #[test]
    fn levels_make_each_rows_lists() {
        // Row 0: [[1, 2], [3]]; row 1: []; row 2: null; row 3: [null, [null]].
        let defs = [5, 5, 5, 1, 0, 2, 4];
        let reps = [0, 2, 1, 0, 0, 0, 1];
        let values = vec![f(1.0), f(2.0), f(3.0)];
        let rows = assemble(&defs, &reps, values, 4, 5, &nested(), 16).unwrap();
        assert_eq!(
            rows,
            [
                Item::List(vec![
                    Item::List(vec![f(1.0), f(2.0)]),
                    Item::List(vec![f(3.0)])
                ]),
                Item::List(vec![]),
                Item::Null,
                Item::List(vec![Item::Null, Item::List(vec![Item::Null])]),
            ]
        );
        // A row of more levels than the field takes: too many, its values passed over.
        let rows = assemble(
            &defs,
            &reps,
            vec![f(1.0), f(2.0), f(3.0)],
            4,
            5,
            &nested(),
            2,
        );
        assert_eq!(rows.unwrap()[0], Item::TooMany(3));
    }

    #[test]
    fn levels_that_make_no_rows_are_refused() {
        let marks = nested();
        let run = |defs: &[i16], reps: &[i16], values: usize, rows: usize| {
            assemble(defs, reps, vec![f(0.0); values], rows, 5, &marks, 16)
        };
        // A first level that continues a row; a level past the deepest list; a
        // definition past the column's; values and levels that disagree; rows not the
        // footer's; a level continuing a null or empty list.
        assert!(run(&[5], &[1], 1, 1).is_err());
        assert!(run(&[5], &[3], 1, 1).is_err());
        assert!(run(&[6], &[0], 1, 1).is_err());
        assert!(run(&[5, 5], &[0, 1], 1, 1).is_err());
        assert!(run(&[5], &[0], 2, 1).is_err());
        assert!(run(&[5], &[0], 1, 2).is_err());
        assert!(run(&[0, 5], &[0, 1], 1, 1).is_err());
        assert!(run(&[1, 5], &[0, 2], 1, 1).is_err());
        assert!(run(&[5], &[0, 0], 1, 1).is_err());
    }
}
