//! Plain text tables: a header and aligned columns.

/// Rows of cells under a header, printed with each column as wide as its widest cell.
pub(crate) struct Table {
    header: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(header: &[&'static str]) -> Self {
        Self {
            header: header.to_vec(),
            rows: Vec::new(),
        }
    }

    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// A table under `header` with a row for each of `items`, of the cells `cells` gives it.
    pub(crate) fn of<T>(
        header: &[&'static str],
        items: impl IntoIterator<Item = T>,
        cells: impl Fn(T) -> Vec<String>,
    ) -> Self {
        let mut table = Self::new(header);
        for item in items {
            table.row(cells(item));
        }
        table
    }

    /// The table as text, or `none` when it has no rows.
    pub(crate) fn render(&self, none: &str) -> String {
        if self.rows.is_empty() {
            return format!("{none}\n");
        }
        let mut widths: Vec<usize> = self.header.iter().map(|cell| cell.len()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let mut text = String::new();
        let header: Vec<String> = self.header.iter().map(|cell| cell.to_string()).collect();
        for row in std::iter::once(&header).chain(&self.rows) {
            let cells: Vec<String> = row
                .iter()
                .zip(&widths)
                .map(|(cell, width)| format!("{cell:<width$}"))
                .collect();
            text.push_str(cells.join("  ").trim_end());
            text.push('\n');
        }
        text
    }
}
