//! [`Out`]: what a command prints, kept until it ends and then written at once, as text or
//! (`--json`) as JSON.

use std::fmt::Write as _;
use std::io::Write as _;

use serde::Serialize;

use crate::complain;
use crate::table::Table;

/// The command's output, kept until it ends and then written at once (see `main`).
pub(crate) struct Out {
    pub(crate) json: bool,
    pub(crate) text: String,
}

impl Out {
    /// Adds `line` and a newline.
    pub(crate) fn line(&mut self, line: std::fmt::Arguments<'_>) {
        let _ = writeln!(self.text, "{line}");
    }

    /// Adds `text` as it is.
    pub(crate) fn text(&mut self, text: &str) {
        self.text.push_str(text);
    }

    pub(crate) fn print_json(&mut self, value: &impl Serialize) {
        match serde_json::to_string_pretty(value) {
            Ok(text) => say!(self, "{text}"),
            Err(error) => complain(format_args!(
                "error: the result does not serialise: {error}"
            )),
        }
    }

    /// An action's result: `value` as JSON, or the sentence `human` says.
    pub(crate) fn result(&mut self, value: &impl Serialize, human: impl FnOnce() -> String) {
        match self.json {
            true => self.print_json(value),
            false => say!(self, "{}", human()),
        }
    }

    /// A listing: `value` as JSON, or the table `table` makes as text (`none` when it has
    /// no rows).
    pub(crate) fn listing(
        &mut self,
        value: &impl Serialize,
        none: &str,
        table: impl FnOnce() -> Table,
    ) {
        match self.json {
            true => self.print_json(value),
            false => self.text(&table().render(none)),
        }
    }

    /// Writes the output to standard output.
    pub(crate) fn flush(&self) -> std::io::Result<()> {
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(self.text.as_bytes())?;
        stdout.flush()
    }
}

/// The most characters of arguments a table's cell shows (`--json` shows what the
/// administration API returns).
const ARGUMENTS_CELL_CHARS: usize = 60;

/// Arguments for a table's cell: compact JSON (a string, such as arguments the listing cut,
/// as its text), every control character escaped as `\uXXXX` ([`escaped`]), cut at
/// [`ARGUMENTS_CELL_CHARS`] with `…`.
pub(crate) fn arguments(value: &serde_json::Value) -> String {
    let text = match value {
        serde_json::Value::String(text) => escaped(text),
        value => escaped(&value.to_string()),
    };
    match text.char_indices().nth(ARGUMENTS_CELL_CHARS) {
        None => text,
        Some((cut, _)) => format!("{}…", &text[..cut]),
    }
}

/// `text` with every control character (C0, DEL and C1: a terminal acts on U+009B as on
/// `ESC [`) escaped as `\uXXXX`, so that what a handler or a caller wrote can neither
/// drive the terminal nor forge a row of a table.
pub(crate) fn escaped(text: &str) -> String {
    escaped_but(text, |_| false)
}

/// [`escaped`], keeping the control characters `kept` says (a pretty-printed JSON's line
/// breaks).
pub(crate) fn escaped_but(text: &str, kept: impl Fn(char) -> bool) -> String {
    text.chars().fold(String::new(), |mut shown, c| {
        if c.is_control() && !kept(c) {
            let _ = write!(shown, "\\u{:04x}", u32::from(c));
        } else {
            shown.push(c);
        }
        shown
    })
}

/// A time, or `-` for none.
pub(crate) fn time(at: Option<chrono::DateTime<chrono::Utc>>) -> String {
    at.map_or_else(|| "-".to_owned(), |at| at.to_string())
}
