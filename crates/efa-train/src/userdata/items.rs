//! An item-feature table given again with a trained model: it must be the table the model
//! was trained with (the model file keeps its site table).

use super::UserConfig;
use crate::TrainError;
use efa_data::item_csv::ItemTable;
use efa_data::DataError;
use efa_model::ModelConfig;

/// Checks that `table` gives exactly the site table stored in `cfg` (a trained model's
/// configuration): every listed item's features equal, and every item of the stored table
/// with non-zero features listed. The error names the table's file, line and field of the
/// first difference.
pub fn check_items_match(cfg: &UserConfig, table: &ItemTable) -> Result<(), TrainError> {
    let sites = match &cfg.model {
        ModelConfig::Efa(c) => c.continuous.as_ref().map(|c| &c.sites),
        _ => None,
    };
    let Some(sites) = sites else {
        return Err(TrainError::config(
            "model.efa.continuous",
            "an item-feature table was given, but the model has no continuous inputs",
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
    for (item, (g, s)) in given.iter().zip(sites).enumerate().skip(1) {
        if g == s {
            continue;
        }
        let row = table.get(item);
        let k = g.iter().zip(s).position(|(a, b)| a != b).unwrap_or(0);
        let (line, field) = match row {
            Some(r) => (r.line, table.features[k].as_str()),
            None => (0, "item"),
        };
        return Err(DataError::parse(
            &table.file,
            line,
            field,
            &g[k].to_string(),
            format!(
                "item {item}: the model was trained with {} here (the item-feature table must \
                 be the training one)",
                s[k]
            ),
        )
        .into());
    }
    Ok(())
}
