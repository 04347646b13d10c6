//! Calls that share one transaction: a synchronous call's turn, its group's leader, runs in
//! its own transaction the turns of the calls that came while it ran (its members), each in
//! a savepoint of its own, in the order they came, and commits them all with one `COMMIT`.
//!
//! Every transaction pays its `BEGIN`, its `COMMIT` and its flush, and a hot actor's callers
//! queue on its lock, each behind the commit before it. A group pays them once for all its
//! turns, and its members of the leader's actor need no lock of their own.
//!
//! Who joins which group:
//! - a call whose actor an open group holds (its leader's, or a member's) joins that group;
//! - on a server, a call of another actor joins the group with the fewest turns among those
//!   taking members in (their leader's own turn is written) once [`SERVER_LEADERS`] groups
//!   are open, and leads a group of its own before that: neither a leader's wait for its own
//!   lock nor its handler ever holds a call of another actor;
//! - any other call leads a group, and its turn runs as it would alone.
//!
//! The rules a group keeps:
//! - A member never waits for a lock while the group holds others: its actor is locked
//!   without waiting, and one another transaction holds runs alone, in a transaction of its
//!   own. So does a member whose actor has no row yet (creating it could wait for another
//!   transaction's insert), one whose actor has queued messages (strict order: they run
//!   first), and one whose turn failed outside its handler or ran past the group's budget or
//!   its own caller's time. Nothing of such a member is kept: its savepoint is rolled back.
//! - A member hears its answer only after the group's `COMMIT`, a message its idempotency
//!   key found included (it may be an earlier member's); a `COMMIT` that failed tells each
//!   member that nothing was kept (it runs again), and one whose answer was lost tells each
//!   to look its message up by request id, as a lone turn's does.
//! - A member whose caller went away before the leader took it is dropped, unrun; one taken
//!   commits with the group. A leader that goes away takes its taken members' answers with
//!   it: they look their messages up. Members still queued when a group closes try again.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;
use tokio::time::Instant;

use async_trait::async_trait;

use super::one_turn::{Lead, Turns};
use super::written::{Uncommitted, Written};
use super::TurnReport;
use crate::error::Error;
use crate::limits::{deadline_after, GroupCommit};
use crate::store::{ActorKey, MessageRecord, Transaction};

/// The most turns one group carries on a server, whatever the settings say: each member is a
/// subtransaction, and PostgreSQL keeps only 64 of a transaction's in memory.
const SERVER_MAX_TURNS: usize = 32;

/// How many groups a server's calls lead at once before a call of another actor joins one of
/// them instead of leading its own: enough to keep the connections busy, few enough that
/// each group has turns to share its commit with.
pub(super) const SERVER_LEADERS: usize = 2;

/// What a member hears from its group.
pub(super) enum Reply {
    /// Its turn committed with the group.
    Ran(TurnReport),
    /// The group's `COMMIT` ended in doubt, or its leader went away after taking it: its
    /// message is looked up by request id.
    InDoubt,
    /// Nothing of it was kept: it tries again, and may join another group.
    Retry,
    /// Nothing of it was kept: it runs in a transaction of its own.
    Alone,
    /// Its idempotency key names a message committed before.
    Found(MessageRecord),
    /// What its call hears, nothing written (a paused actor, a state that no longer reads).
    Failed(Error),
}

/// A member's turn, run by its group's leader in the group's transaction (which it hands
/// back, unless it lost it) before the `until` the group needs it back by.
pub(super) type MemberTurn = Box<
    dyn for<'e> FnOnce(
            Turns<'e>,
            Box<dyn Transaction>,
            Instant,
        ) -> Pin<Box<dyn Future<Output = MemberRan> + Send + 'e>>
        + Send,
>;

/// What running a member's turn came to.
pub(super) struct MemberRan {
    /// The group's transaction, unless the member lost it.
    pub(super) tx: Option<Box<dyn Transaction>>,
    pub(super) outcome: MemberOutcome,
}

/// A member's turn written in the group's transaction, or what its caller hears now.
pub(super) enum MemberOutcome {
    Written(Written),
    Reply(Reply),
}

/// A member waiting for its group's leader to take it.
struct Queued {
    ticket: u64,
    turn: MemberTurn,
    reply: oneshot::Sender<Reply>,
}

/// An actor, by stored type name and id.
type ActorName = (&'static str, String);

/// An open group: the members waiting to be taken, and the actors its transaction holds.
struct Group {
    queue: VecDeque<Queued>,
    /// Its turns so far, the leader's included, taken or waiting.
    turns: usize,
    actors: Vec<ActorName>,
    /// Whether calls of other actors may join: only once its leader's turn is written and it
    /// takes members in, so that neither the leader's wait for its own lock nor its handler
    /// holds a call of another actor.
    taking: bool,
}

/// The open groups of this process.
#[derive(Default)]
struct Open {
    groups: HashMap<u64, Group>,
    by_actor: HashMap<ActorName, u64>,
    next_id: u64,
}

impl Open {
    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Closes group `id` to new members; the members still waiting try again.
    fn close(&mut self, id: u64) {
        let Some(group) = self.groups.remove(&id) else {
            return;
        };
        for actor in group.actors {
            if self.by_actor.get(&actor) == Some(&id) {
                self.by_actor.remove(&actor);
            }
        }
        for queued in group.queue {
            let _ = queued.reply.send(Reply::Retry);
        }
    }
}

/// The groups of this engine's synchronous calls, and how large they may grow.
pub(crate) struct Groups {
    settings: GroupCommit,
    /// Whether calls of other actors join a group (on a server; SQLite's writer groups its
    /// transactions itself).
    across_actors: bool,
    open: Mutex<Open>,
}

/// Where a call's turn runs.
pub(super) enum Entered<'g> {
    /// In a transaction of its own: grouping is off, or its actor's group is full.
    Alone,
    /// In a transaction of its own, which takes in the calls that come meanwhile.
    Lead(Leading<'g>),
    /// In another call's transaction.
    Joined(Joined<'g>),
}

impl Groups {
    /// Groups as `settings` say, of one actor's calls only, or (`across_actors`) of any.
    pub(crate) fn new(settings: GroupCommit, across_actors: bool) -> Self {
        Self {
            settings,
            across_actors,
            open: Mutex::new(Open::default()),
        }
    }

    /// Until when a group whose leader's turn is written now takes members in.
    fn taking_until(&self) -> Instant {
        deadline_after(self.settings.wait())
    }

    fn max_turns(&self) -> usize {
        match self.across_actors {
            true => self.settings.turns().min(SERVER_MAX_TURNS),
            false => self.settings.turns(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where the call of `key` runs; `member` makes its turn, and is called only if it joins
    /// a group.
    pub(super) fn enter(
        &self,
        key: ActorKey<'static, '_>,
        member: impl FnOnce() -> MemberTurn,
    ) -> Entered<'_> {
        if !self.settings.is_on() {
            return Entered::Alone;
        }
        let max_turns = self.max_turns();
        let mut open = self.lock();
        let actor = (key.actor_type, key.actor_id.to_owned());
        let holder = open.by_actor.get(&actor).copied();
        let target = match holder {
            Some(id) if open.groups.get(&id).is_some_and(|g| g.turns < max_turns) => Some(id),
            // Its actor's group is full: the call waits for the actor's lock alone.
            Some(_) => return Entered::Alone,
            None if self.across_actors && open.groups.len() >= SERVER_LEADERS => open
                .groups
                .iter()
                .filter(|(_, group)| group.taking && group.turns < max_turns)
                // The oldest of the least full: the map's own order changes from run to run.
                .min_by_key(|(id, group)| (group.turns, **id))
                .map(|(id, _)| *id),
            None => None,
        };
        let Some(id) = target else {
            let id = open.next_id();
            open.by_actor.insert(actor.clone(), id);
            let group = Group {
                queue: VecDeque::new(),
                turns: 1,
                actors: vec![actor],
                taking: false,
            };
            open.groups.insert(id, group);
            return Entered::Lead(Leading {
                groups: self,
                id,
                taken: Vec::new(),
            });
        };
        let ticket = open.next_id();
        let (reply, heard) = oneshot::channel();
        if holder.is_none() {
            open.by_actor.insert(actor.clone(), id);
        }
        let group = open.groups.get_mut(&id).expect("the target group is open");
        if holder.is_none() {
            group.actors.push(actor);
        }
        group.turns += 1;
        group.queue.push_back(Queued {
            ticket,
            turn: member(),
            reply,
        });
        Entered::Joined(Joined {
            groups: self,
            id,
            ticket,
            heard,
        })
    }
}

/// A call that leads a group: it takes the members in once its own turn is written, and
/// tells them how the commit ended. Dropped, it closes the group.
pub(super) struct Leading<'g> {
    groups: &'g Groups,
    id: u64,
    /// The members taken whose answers wait for the group's commit.
    taken: Vec<(oneshot::Sender<Reply>, Taken)>,
}

/// What a member taken into its group leaves to be answered once the group's commit ends.
enum Taken {
    /// Its turn, written in the group's transaction.
    Written(Written),
    /// The message its idempotency key names, found in the group's transaction: maybe an
    /// earlier member's, which is only there if the group commits.
    Found(MessageRecord),
}

impl Leading<'_> {
    /// The next member to take, skipping those whose callers went away; `None` closes the
    /// group.
    fn next_member(&mut self, until: Instant) -> Option<Queued> {
        let mut open = self.groups.lock();
        let taken = self.taken.len();
        let group = open.groups.get_mut(&self.id)?;
        while Instant::now() < until && taken < self.groups.max_turns() {
            match group.queue.pop_front() {
                Some(queued) if queued.reply.is_closed() => continue,
                Some(queued) => return Some(queued),
                None => break,
            }
        }
        open.close(self.id);
        None
    }
}

#[async_trait]
impl Lead for Leading<'_> {
    fn taking_until(&self) -> Instant {
        self.groups.taking_until()
    }

    /// Runs the waiting members' turns in `tx`, in the order they came, until none waits,
    /// the group is full or `until` passes; then closes the group to new members. Hands the
    /// transaction back, or says why the leader's turn is lost with it.
    async fn take_members(
        &mut self,
        turns: Turns<'_>,
        mut tx: Box<dyn Transaction>,
        until: Instant,
    ) -> Result<Box<dyn Transaction>, Uncommitted> {
        if let Some(group) = self.groups.lock().groups.get_mut(&self.id) {
            group.taking = true;
        }
        while let Some(queued) = self.next_member(until) {
            let ran = (queued.turn)(turns, tx, until).await;
            match ran.outcome {
                MemberOutcome::Written(written) => {
                    self.taken.push((queued.reply, Taken::Written(written)));
                }
                MemberOutcome::Reply(Reply::Found(found)) => {
                    self.taken.push((queued.reply, Taken::Found(found)));
                }
                MemberOutcome::Reply(reply) => {
                    let _ = queued.reply.send(reply);
                }
            }
            match ran.tx {
                Some(back) => tx = back,
                None => {
                    self.uncommitted(false);
                    return Err(Uncommitted::Conflict(
                        "a turn that joined its group lost the group's transaction".to_owned(),
                    ));
                }
            }
        }
        Ok(tx)
    }

    /// The group's transaction committed: each member's turn is reported (and counted), in
    /// the order they ran, and its caller told.
    fn committed(&mut self, turns: Turns<'_>) {
        for (member, taken) in self.taken.drain(..) {
            let reply = match taken {
                Taken::Written(written) => {
                    turns.core().store().counters().grouped_turn();
                    Reply::Ran(turns.turn_committed(written))
                }
                Taken::Found(found) => Reply::Found(found),
            };
            let _ = member.send(reply);
        }
    }

    /// The group's transaction did not commit (`in_doubt`: or its answer was lost): each
    /// member is told; one that found its key's message looks it up again.
    fn uncommitted(&mut self, in_doubt: bool) {
        for (reply, taken) in self.taken.drain(..) {
            let _ = reply.send(match (in_doubt, taken) {
                (true, Taken::Written(_)) => Reply::InDoubt,
                (false, Taken::Written(_)) | (_, Taken::Found(_)) => Reply::Retry,
            });
        }
    }
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        self.groups.lock().close(self.id);
    }
}

/// A call waiting in a group for its leader to run its turn.
pub(super) struct Joined<'g> {
    groups: &'g Groups,
    id: u64,
    ticket: u64,
    heard: oneshot::Receiver<Reply>,
}

/// What a member waited for came to.
pub(super) enum Heard {
    Reply(Box<Reply>),
    /// Its deadline passed before the leader took it: nothing of it was written.
    Withdrawn,
    /// Its deadline passed after the leader took it: its turn commits with the group, or
    /// not.
    TakenAtDeadline,
}

impl Joined<'_> {
    /// Waits for the group's word until `deadline`.
    pub(super) async fn heard(mut self, deadline: Instant) -> Heard {
        match tokio::time::timeout_at(deadline, &mut self.heard).await {
            Ok(Ok(reply)) => Heard::Reply(Box::new(reply)),
            // The leader went away after it took the member: the commit may have landed.
            Ok(Err(_)) => Heard::Reply(Box::new(Reply::InDoubt)),
            Err(_) if self.withdraw() => Heard::Withdrawn,
            Err(_) => match self.heard.try_recv() {
                Ok(reply) => Heard::Reply(Box::new(reply)),
                Err(_) => Heard::TakenAtDeadline,
            },
        }
    }

    /// Takes the member out of its group's queue; false if the leader took it already.
    fn withdraw(&self) -> bool {
        let mut open = self.groups.lock();
        let Some(group) = open.groups.get_mut(&self.id) else {
            return false;
        };
        let before = group.queue.len();
        group.queue.retain(|queued| queued.ticket != self.ticket);
        group.queue.len() < before
    }
}
