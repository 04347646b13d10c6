//! The figures behind the operators' charts: a window of time cut into slices, and for each
//! slice what finished, how many attempts failed, what was waiting at its end and how late
//! reminders ran; built from the store's counts by slice.
//!
//! The store counts rows by the slice they started and ended in (a message enqueued, then
//! finished; a reminder due, then fired; an effect emitted, then done); what waited at the
//! end of a slice is what started by then and had not ended by then. Those figures reach back
//! as far as the retention task keeps finished rows (30 days unless the application says
//! otherwise), far beyond the longest window.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, TimeDelta, Utc};
use serde::Serialize;

use crate::store::activity::{ActivityRows, LatenessCount, SliceOutcomes, Span, Waited};
use crate::time::micros::from_micros;

/// How far back the charts look: the last 15 minutes or the last hour, a point per minute, or
/// the last 24 hours, a point per half hour.
///
/// It reads from and writes as its short name: `15m`, `1h` or `24h`.
///
/// # Examples
///
/// ```
/// use solid_objects::admin::Window;
///
/// let window: Window = "24h".parse().unwrap();
/// assert_eq!(window, Window::Day);
/// assert_eq!(window.to_string(), "24h");
/// assert!("2h".parse::<Window>().is_err());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[non_exhaustive]
pub enum Window {
    /// The last 15 minutes, a point per minute.
    #[serde(rename = "15m")]
    FifteenMinutes,
    /// The last hour, a point per minute.
    #[default]
    #[serde(rename = "1h")]
    Hour,
    /// The last 24 hours, a point per half hour.
    #[serde(rename = "24h")]
    Day,
}

impl Window {
    /// Every window, the shortest first.
    pub const ALL: [Window; 3] = [Window::FifteenMinutes, Window::Hour, Window::Day];

    /// Its short name: `15m`, `1h` or `24h`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FifteenMinutes => "15m",
            Self::Hour => "1h",
            Self::Day => "24h",
        }
    }

    /// How long one of its slices (one point of a chart) is.
    pub fn slice(self) -> TimeDelta {
        match self {
            Self::FifteenMinutes | Self::Hour => TimeDelta::minutes(1),
            Self::Day => TimeDelta::minutes(30),
        }
    }

    /// How many slices it has.
    pub fn slices(self) -> usize {
        match self {
            Self::FifteenMinutes => 15,
            Self::Hour => 60,
            Self::Day => 48,
        }
    }

    /// The slices of this window that end with the one `now` is in, in stored microseconds.
    pub(crate) fn span(self, now: i64) -> Span {
        let width = self.slice().num_microseconds().unwrap_or(i64::MAX);
        let until = now - now.rem_euclid(width) + width;
        let slices = i64::try_from(self.slices()).unwrap_or(i64::MAX);
        Span {
            from: until - slices * width,
            until,
            width,
            now,
        }
    }
}

impl fmt::Display for Window {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

impl FromStr for Window {
    type Err = UnknownWindow;

    fn from_str(name: &str) -> Result<Self, UnknownWindow> {
        Self::ALL
            .into_iter()
            .find(|window| window.as_str() == name)
            .ok_or_else(|| UnknownWindow {
                given: name.chars().take(UNKNOWN_WINDOW_SHOWN).collect(),
            })
    }
}

/// The most characters of an unknown window's name that its error repeats.
const UNKNOWN_WINDOW_SHOWN: usize = 32;

/// A window's name that is none of `15m`, `1h` and `24h`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("there is no window {given:?}: the charts show 15m, 1h or 24h")]
#[non_exhaustive]
pub struct UnknownWindow {
    /// The name given (its first 32 characters).
    pub given: String,
}

/// How the messages of one slice ended, and how many attempts failed in it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Outcomes {
    /// Messages whose turn completed.
    pub completed: i64,
    /// Messages whose handler rejected them.
    pub rejected: i64,
    /// Attempts that failed: each retried one, and the last attempt of each dead letter.
    pub failed_attempts: i64,
    /// Messages that became dead letters.
    pub dead: i64,
}

impl Outcomes {
    /// Whether nothing finished and nothing failed.
    pub fn is_none(&self) -> bool {
        *self == Self::default()
    }
}

/// What was waiting at the end of a slice (for the slice under way: now).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Backlog {
    /// Messages in mailboxes, not finished: due ones, and those that wait for a delay or for
    /// the retry of a failed attempt.
    pub ready_messages: i64,
    /// Reminders that were due and had not fired.
    pub due_reminders: i64,
    /// Effects emitted and not yet done or dead: waiting, or running.
    pub pending_effects: i64,
}

impl Backlog {
    /// Whether nothing waited.
    pub fn is_none(&self) -> bool {
        *self == Self::default()
    }
}

/// How late the reminders whose turns ended in one slice ran: how long after their due time
/// their turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Lateness {
    /// How many reminders' turns ended in the slice.
    pub reminders: i64,
    /// The median lateness, in milliseconds (nearest rank), to two significant figures
    /// rounded down (below 100 ms, exact).
    pub p50_ms: i64,
    /// The 99th percentile's, in milliseconds (nearest rank), to two significant figures
    /// rounded down (below 100 ms, exact).
    pub p99_ms: i64,
}

/// One slice of a window, across every actor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ActivityPoint {
    /// When the slice starts.
    pub at: DateTime<Utc>,
    /// What finished, and the attempts that failed, in the slice.
    pub finished: Outcomes,
    /// What was waiting at its end.
    pub backlog: Backlog,
    /// How late the reminders that ran in it were; `None` if none ran.
    pub lateness: Option<Lateness>,
}

/// What every actor did over a window: the overview's charts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Activity {
    /// The window.
    pub window: Window,
    /// The runtime clock's time when it was read; the last slice is the one under way.
    pub now: DateTime<Utc>,
    /// Its slices, the oldest first.
    pub points: Vec<ActivityPoint>,
}

impl Activity {
    /// Whether nothing finished, failed, waited or ran late in the whole window.
    pub fn is_idle(&self) -> bool {
        self.points.iter().all(|point| {
            point.finished.is_none() && point.backlog.is_none() && point.lateness.is_none()
        })
    }
}

/// One slice of a window, for one actor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ActorActivityPoint {
    /// When the slice starts.
    pub at: DateTime<Utc>,
    /// Its messages that finished, and its attempts that failed, in the slice.
    pub finished: Outcomes,
}

/// What one actor did over a window: its turns and failures, for its page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ActorActivity {
    /// The window.
    pub window: Window,
    /// The runtime clock's time when it was read; the last slice is the one under way.
    pub now: DateTime<Utc>,
    /// Its slices, the oldest first.
    pub points: Vec<ActorActivityPoint>,
}

impl ActorActivity {
    /// Whether nothing of the actor finished or failed in the whole window.
    pub fn is_idle(&self) -> bool {
        self.points.iter().all(|point| point.finished.is_none())
    }
}

/// A count per slice of a span, with what began before it.
struct Tally<'s> {
    span: &'s Span,
    /// What started before the window and is still counted.
    before: i64,
    /// Changes per slice.
    slices: Vec<i64>,
}

impl<'s> Tally<'s> {
    fn new(span: &'s Span) -> Self {
        let slices = usize::try_from((span.until - span.from) / span.width).unwrap_or(0);
        Self {
            span,
            before: 0,
            slices: vec![0; slices],
        }
    }

    /// Adds `count` in the slice that starts at `slice` (before the window: to what began
    /// before it; after it, nowhere).
    fn add(&mut self, slice: i64, count: i64) {
        if slice < self.span.from {
            self.before += count;
        } else if let Some(changes) = usize::try_from((slice - self.span.from) / self.span.width)
            .ok()
            .and_then(|index| self.slices.get_mut(index))
        {
            *changes += count;
        }
    }

    /// What waited at the end of each slice, from things that each started waiting in one
    /// slice and stopped in another: what began before the window, and every change up to
    /// and including the slice.
    fn waiting(span: &'s Span, waited: &[Waited]) -> Vec<i64> {
        let mut tally = Self::new(span);
        for waited in waited {
            tally.add(waited.started, waited.count);
            if let Some(ended) = waited.ended {
                tally.add(ended, -waited.count);
            }
        }
        tally
            .slices
            .iter()
            .scan(tally.before, |total, change| {
                *total += change;
                Some(*total)
            })
            .collect()
    }
}

/// The start of each slice of `span`.
fn starts(span: &Span) -> impl Iterator<Item = DateTime<Utc>> + '_ {
    (0..)
        .map(move |index| span.from + index * span.width)
        .take_while(move |start| *start < span.until)
        .map(from_micros)
}

/// The outcomes of the slice starting at `slice`, as the store counted them (none if it
/// returned no row for it).
fn outcomes(rows: &[SliceOutcomes], slice: i64) -> Outcomes {
    rows.iter()
        .find(|row| row.slice == slice)
        .map_or_else(Outcomes::default, |row| Outcomes {
            completed: row.completed,
            rejected: row.rejected,
            failed_attempts: row.failed_attempts,
            dead: row.dead,
        })
}

/// The whole database's figures over `window`, from what the store counted over its `span`.
pub(super) fn activity(window: Window, span: &Span, rows: &ActivityRows) -> Activity {
    let ready_messages = Tally::waiting(span, &rows.ready_messages);
    let due_reminders = Tally::waiting(span, &rows.due_reminders);
    let pending_effects = Tally::waiting(span, &rows.pending_effects);
    let points = starts(span)
        .enumerate()
        .map(|(index, at)| {
            let slice = at.timestamp_micros();
            ActivityPoint {
                at,
                finished: outcomes(&rows.outcomes, slice),
                backlog: Backlog {
                    ready_messages: ready_messages[index],
                    due_reminders: due_reminders[index],
                    pending_effects: pending_effects[index],
                },
                lateness: lateness(&rows.lateness, slice),
            }
        })
        .collect();
    Activity {
        window,
        now: from_micros(span.now),
        points,
    }
}

/// The lateness of the reminders of the slice starting at `slice`, from how many ran with
/// each lateness bucket: the buckets of the median's and the 99th percentile's reminder
/// (nearest rank). A reminder fires only once due, so a turn that ended before its due time
/// did so by a clock that stepped back after it fired: it ran on time, not early.
fn lateness(rows: &[LatenessCount], slice: i64) -> Option<Lateness> {
    let mut buckets: Vec<(i64, i64)> = rows
        .iter()
        .filter(|row| row.slice == slice && row.reminders > 0)
        .map(|row| (row.lateness_ms.max(0), row.reminders))
        .collect();
    buckets.sort_unstable();
    let reminders: i64 = buckets.iter().map(|(_, count)| count).sum();
    if reminders == 0 {
        return None;
    }
    // The bucket of the reminder at `rank` (from 1), in order of lateness.
    let at_rank = |rank: i64| {
        let mut seen = 0;
        buckets
            .iter()
            .find(|(_, count)| {
                seen += count;
                seen >= rank
            })
            .map_or(0, |(ms, _)| *ms)
    };
    Some(Lateness {
        reminders,
        p50_ms: at_rank((reminders + 1) / 2),
        p99_ms: at_rank((99 * reminders + 99) / 100),
    })
}

/// One actor's figures over `window`, from what the store counted over its `span`.
pub(super) fn actor_activity(window: Window, span: &Span, rows: &[SliceOutcomes]) -> ActorActivity {
    let points = starts(span)
        .map(|at| ActorActivityPoint {
            at,
            finished: outcomes(rows, at.timestamp_micros()),
        })
        .collect();
    ActorActivity {
        window,
        now: from_micros(span.now),
        points,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: i64 = 60_000_000;

    /// The hour that ends with the minute under way at 10:30:20 on the epoch's first day.
    fn hour() -> Span {
        Window::Hour.span(10 * 60 * MINUTE + 30 * MINUTE + 20_000_000)
    }

    #[test]
    fn a_window_ends_with_the_slice_under_way() {
        let span = hour();
        assert_eq!(span.until, 10 * 60 * MINUTE + 31 * MINUTE);
        assert_eq!(span.from, span.until - 60 * MINUTE);
        assert_eq!(span.width, MINUTE);
        let day = Window::Day.span(span.now);
        assert_eq!(day.until, 11 * 60 * MINUTE);
        assert_eq!((day.until - day.from) / day.width, 48);
    }

    #[test]
    fn what_waited_is_what_started_and_had_not_ended_by_the_end_of_each_slice() {
        let span = hour();
        let at = |minute: i64| span.from + minute * MINUTE;
        let waited = |started: i64, ended: Option<i64>, count: i64| Waited {
            started,
            ended,
            count,
        };
        let rows = ActivityRows {
            outcomes: vec![SliceOutcomes {
                slice: at(4),
                completed: 2,
                failed_attempts: 7,
                ..SliceOutcomes::default()
            }],
            ready_messages: vec![
                // Enqueued before the window, finished in its minute 2.
                waited(at(-1), Some(at(2)), 1),
                // Enqueued in minute 1, waiting still.
                waited(at(1), None, 1),
                // Enqueued in minute 3, finished in minute 4.
                waited(at(3), Some(at(4)), 1),
            ],
            due_reminders: vec![
                // Due before the window, fired in minute 3; two due in minute 5, not fired.
                waited(at(-1), Some(at(3)), 1),
                waited(at(5), None, 2),
            ],
            pending_effects: vec![waited(at(0), Some(at(1)), 3)],
            lateness: vec![
                LatenessCount {
                    slice: at(4),
                    lateness_ms: 9000,
                    reminders: 1,
                },
                LatenessCount {
                    slice: at(4),
                    lateness_ms: 1500,
                    reminders: 2,
                },
            ],
        };
        let activity = activity(Window::Hour, &span, &rows);
        let column = |pick: fn(&ActivityPoint) -> i64| -> Vec<i64> {
            activity.points[..7].iter().map(pick).collect()
        };
        assert_eq!(
            column(|point| point.backlog.ready_messages),
            [1, 2, 1, 2, 1, 1, 1]
        );
        assert_eq!(
            column(|point| point.backlog.due_reminders),
            [1, 1, 1, 0, 0, 2, 2]
        );
        assert_eq!(
            column(|point| point.backlog.pending_effects),
            [3, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            column(|point| point.finished.completed),
            [0, 0, 0, 0, 2, 0, 0]
        );
        assert_eq!(
            column(|point| point.finished.failed_attempts),
            [0, 0, 0, 0, 7, 0, 0]
        );
        let late = activity.points[4]
            .lateness
            .expect("reminders ran in minute 4");
        assert_eq!((late.reminders, late.p50_ms, late.p99_ms), (3, 1500, 9000));
        assert_eq!(activity.points[3].lateness, None);
        assert!(!activity.is_idle());
    }

    #[test]
    fn window_names_read_and_write_the_same() {
        for window in Window::ALL {
            assert_eq!(window.as_str().parse::<Window>(), Ok(window));
        }
        let long = "x".repeat(100);
        let unknown = long.parse::<Window>().unwrap_err();
        assert_eq!(unknown.given.len(), 32, "an unknown name is cut short");
    }
}
