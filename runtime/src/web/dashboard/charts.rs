//! The charts of the overview and of an actor's page, from the administration API's figures:
//! which series each chart draws, its titles and axes, the links to the other windows, and
//! what a window with nothing to draw says instead.

use chrono::{DateTime, Utc};
use maud::{html, Markup};

use super::svg::{self, Chart, Series, Unit};
use crate::admin::{Activity, ActorActivity, Backlog, Lateness, Outcomes, Window};

/// A window's name on its link.
fn window_name(window: Window) -> &'static str {
    match window {
        Window::FifteenMinutes => "15 minutes",
        Window::Hour => "hour",
        Window::Day => "24 hours",
    }
}

/// What one point of a window's charts stands for.
fn slice_name(window: Window) -> &'static str {
    match window {
        Window::FifteenMinutes | Window::Hour => "minute",
        Window::Day => "half hour",
    }
}

/// Links to `link` over each other window, and the one shown (not a link).
fn window_links(link: &str, shown: Window) -> Markup {
    html! {
        p.windows {
            "Over the last "
            @for window in Window::ALL {
                @if window == shown {
                    strong aria-current="page" { (window_name(window)) }
                } @else {
                    a href={ (link) "?window=" (window) } { (window_name(window)) }
                }
            }
        }
    }
}

/// The most times the horizontal axis of a chart labels.
const MOST_TIME_MARKS: usize = 8;

/// The points of a window's charts: each one's label (when its slice starts, as hours and
/// minutes, UTC), and those whose label the time axis shows: round times (every tenth minute
/// of the hour, every third hour of the day), at most [`MOST_TIME_MARKS`].
struct Times {
    labels: Vec<String>,
    marks: Vec<usize>,
}

impl Times {
    fn of(window: Window, starts: impl Iterator<Item = DateTime<Utc>>) -> Self {
        let starts: Vec<DateTime<Utc>> = starts.collect();
        let slice = window.slice().num_seconds().max(1);
        let every = [1, 2, 3, 5, 6, 10, 12, 15, 20, 30]
            .into_iter()
            .find(|every| starts.len().div_ceil(*every) <= MOST_TIME_MARKS)
            .unwrap_or(starts.len().max(1));
        let every = i64::try_from(every).unwrap_or(i64::MAX);
        Self {
            labels: starts
                .iter()
                .map(|at| at.format("%H:%M").to_string())
                .collect(),
            marks: starts
                .iter()
                .enumerate()
                .filter(|(_, at)| (at.timestamp() / slice) % every == 0)
                .map(|(index, _)| index)
                .collect(),
        }
    }
}

/// A chart of how messages ended and attempts failed, a point per slice; `None` if nothing
/// did.
fn outcomes_chart(
    id: &'static str,
    title: &str,
    window: Window,
    times: &Times,
    outcomes: &[Outcomes],
) -> Option<Markup> {
    if outcomes.iter().all(Outcomes::is_none) {
        return None;
    }
    let series = |name, colour, pick: fn(&Outcomes) -> i64| Series {
        name,
        colour,
        values: outcomes.iter().map(|outcome| Some(pick(outcome))).collect(),
    };
    let measure = format!("messages per {}", slice_name(window));
    let time_axis = format!("{}, UTC", slice_name(window));
    Some(svg::render(&Chart {
        id,
        title,
        measure: &measure,
        time_axis: &time_axis,
        labels: &times.labels,
        marks: &times.marks,
        unit: Unit::Count,
        series: vec![
            series("completed", "#1e7b34", |outcome| outcome.completed),
            series("rejected", "#c77700", |outcome| outcome.rejected),
            series("failed attempts", "#e8453c", |outcome| {
                outcome.failed_attempts
            }),
            series("dead", "#7a1022", |outcome| outcome.dead),
        ],
    }))
}

/// The overview's charts over a window (what finished, what waited, how late reminders ran),
/// with links to the overview at `link` over the other windows.
pub(super) fn overview(link: &str, activity: &Activity) -> Markup {
    let window = activity.window;
    let times = Times::of(window, activity.points.iter().map(|point| point.at));
    let slice = slice_name(window);
    let outcomes: Vec<Outcomes> = activity.points.iter().map(|point| point.finished).collect();
    let finished_title = format!("Finished messages and failed attempts per {slice}");
    let finished = outcomes_chart("finished", &finished_title, window, &times, &outcomes);
    let backlog = activity
        .points
        .iter()
        .any(|point| !point.backlog.is_none())
        .then(|| {
            let series = |name, colour, pick: fn(&Backlog) -> i64| Series {
                name,
                colour,
                values: activity
                    .points
                    .iter()
                    .map(|point| Some(pick(&point.backlog)))
                    .collect(),
            };
            svg::render(&Chart {
                id: "backlog",
                title: &format!("Waiting at the end of each {slice}"),
                measure: "waiting",
                time_axis: &format!("{slice}, UTC"),
                labels: &times.labels,
                marks: &times.marks,
                unit: Unit::Count,
                series: vec![
                    series("ready messages", "#1a56db", |backlog| {
                        backlog.ready_messages
                    }),
                    series("due reminders", "#8e44ad", |backlog| backlog.due_reminders),
                    series("pending effects", "#0f766e", |backlog| {
                        backlog.pending_effects
                    }),
                ],
            })
        });
    let lateness = activity
        .points
        .iter()
        .any(|point| point.lateness.is_some())
        .then(|| {
            let series = |name, colour, pick: fn(&Lateness) -> i64| Series {
                name,
                colour,
                values: activity
                    .points
                    .iter()
                    .map(|point| point.lateness.as_ref().map(pick))
                    .collect(),
            };
            svg::render(&Chart {
                id: "lateness",
                title: &format!("How late reminders ran, per {slice}"),
                measure: "late by",
                time_axis: &format!("{slice}, UTC"),
                labels: &times.labels,
                marks: &times.marks,
                unit: Unit::Milliseconds,
                series: vec![
                    series("p50", "#1a56db", |late| late.p50_ms),
                    series("p99", "#b3261e", |late| late.p99_ms),
                ],
            })
        });
    html! {
        section id="activity" {
            h2 { "Activity" }
            (window_links(link, window))
            @if activity.is_idle() {
                p.idle { "No work in this window." }
            } @else {
                div.charts {
                    div {
                        h3 { (finished_title) }
                        @match finished {
                            Some(chart) => (chart),
                            None => p { "Nothing finished and no attempt failed in this window." },
                        }
                    }
                    div {
                        h3 { "Waiting: ready messages, due reminders, pending effects" }
                        @match backlog {
                            Some(chart) => (chart),
                            None => p { "Nothing waited in this window." },
                        }
                    }
                    div {
                        h3 { "Reminder lateness (p50, p99)" }
                        @match lateness {
                            Some(chart) => (chart),
                            None => p { "No reminder ran in this window." },
                        }
                    }
                }
            }
        }
    }
}

/// One actor's turns and failures over a window, the chart named for the actor, with links
/// to its page at `link` over the other windows.
pub(super) fn actor(link: &str, actor: &str, activity: &ActorActivity) -> Markup {
    let window = activity.window;
    let times = Times::of(window, activity.points.iter().map(|point| point.at));
    let outcomes: Vec<Outcomes> = activity.points.iter().map(|point| point.finished).collect();
    let title = format!(
        "{actor}: messages and failed attempts per {}",
        slice_name(window)
    );
    let chart = outcomes_chart("turns", &title, window, &times, &outcomes);
    html! {
        section id="turns" {
            h2 { "Turns" }
            (window_links(link, window))
            @match chart {
                Some(chart) => { h3 { (title) } (chart) },
                None => p.idle { "No work in this window." },
            }
        }
    }
}
