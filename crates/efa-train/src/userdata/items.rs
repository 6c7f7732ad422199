//! An item-feature table given again with a trained model: it must be the table the model
//! was trained with (the model file keeps its site table).

use super::UserConfig;
use crate::TrainError;
use efa_data::item_csv::ItemTable;
use efa_data::{written, DataError};
use efa_model::ModelConfig;

/// Checks that `table` gives exactly the site table stored in `cfg` (a trained model's
/// configuration): every listed item's features equal, and every item of the stored table
/// with non-zero features listed. The error names the table's file, line and field of the
/// first difference, the field as written there and the trained value in its shortest form;
/// for a model without continuous inputs, the field `model.efa.continuous` and the table's
/// file.
pub fn check_items_match(cfg: &UserConfig, table: &ItemTable) -> Result<(), TrainError> {
    let sites = match &cfg.model {
        ModelConfig::Efa(c) => c.continuous.as_ref().map(|c| &c.sites),
        _ => None,
    };
    let Some(sites) = sites else {
        return Err(TrainError::config(
            "model.efa.continuous",
            format!(
                "the model has no continuous inputs, but the item-feature table {} was given",
                table.file.display()
            ),
        ));
    };
    let given = table.table(sites.len())?;
    let width = sites.first().map_or(0, Vec::len);
    if table.features.len() != width {
        return Err(DataError::parse(
            &table.file,
            1,
            "header",
            &table.features.join(","),
            format!(
                "{} feature columns, but the model was trained with {width}",
                table.features.len()
            ),
        )
        .into());
    }
    // Every row, item 0 included: continuous inputs have no padding row.
    for (item, (g, s)) in given.iter().zip(sites).enumerate() {
        if g == s {
            continue;
        }
        let Some(row) = table.get(item) else {
            let trained: Vec<String> = s.iter().map(|&x| written::shortest(x)).collect();
            return Err(DataError::in_file(
                &table.file,
                format!(
                    "item {item} is not listed, but the model was trained with the features \
                     {} = {} for it (the item-feature table must be the training one)",
                    table.features.join(","),
                    trained.join(",")
                ),
            )
            .into());
        };
        let k = g.iter().zip(s).position(|(a, b)| a != b).unwrap_or(0);
        return Err(DataError::parse(
            &table.file,
            row.line,
            &table.features[k],
            &written::real(&table.file, row.line, &table.features[k], g[k]),
            format!(
                "item {item}: the model was trained with {} here (the item-feature table must \
                 be the training one)",
                written::shortest(s[k])
            ),
        )
        .into());
    }
    Ok(())
}
