//! Semantic checks on the model, each error spanned on the user's code and saying the fix.
//!
//! An operation that fails a check is dropped from the model (after its errors are recorded),
//! so the rest of the actor is still generated and one mistake does not cascade.

use syn::visit::Visit;
use syn::Type;

use crate::errors::Errors;
use crate::model::{ActorImpl, Kind, Migration, Operation, Receiver};

/// Method names every generated reference already has.
const RESERVED: &[&str] = &[
    "snapshot",
    "id",
    "timeout",
    "context",
    "reference",
    "reference_for_key",
    "enqueue",
    "idempotency_key",
    "message_with_key",
    "as_reference",
    "destroy",
    "reminders",
    "watch",
    "watch_with",
];

/// Method names the builders a command's or a reminder's name also goes on already have: a
/// command is on the enqueue builder and the sender (`delay`, `available_at`,
/// `idempotency_key`), a reminder on the schedule builder (`missed`).
const RESERVED_FOR_COMMANDS: &[&str] = &["delay", "available_at", "idempotency_key"];
const RESERVED_FOR_REMINDERS: &[&str] = &["missed"];

/// Checks every operation; keeps the ones that pass.
pub(crate) fn actor_impl(actor: &mut ActorImpl, errors: &mut Errors) {
    let ident = actor.ident.clone();
    actor.operations.retain(|operation| {
        let before = errors.len();
        check_operation(operation, &ident, errors);
        errors.len() == before
    });
    check_migrations(&mut actor.migrations, errors);
}

/// The migrations form one chain, each from the version the one before leads to: no version
/// twice, none skipped. (That the chain ends at the actor's version is checked where the
/// version is known, by constants in the generated code.)
fn check_migrations(migrations: &mut [Migration], errors: &mut Errors) {
    migrations.sort_by_key(|migration| migration.from);
    for pair in migrations.windows(2) {
        let [earlier, later] = pair else { continue };
        if later.from == earlier.from {
            errors.at_span(
                later.from_span,
                format!(
                    "`{}` and `{}` both migrate from version {}; keep one",
                    earlier.name, later.name, later.from
                ),
            );
        } else if later.from != earlier.from + 1 {
            let missing = earlier.from + 1;
            errors.at_span(
                later.from_span,
                format!(
                    "the migrations skip version {missing}: `{}` leads to version {missing}, \
                     but no migration reads it; add #[migrate(from = {missing})] (each \
                     migration reads version n and returns version n + 1)",
                    earlier.name
                ),
            );
        }
    }
}

fn check_operation(operation: &Operation, actor: &syn::Ident, errors: &mut Errors) {
    let attribute = operation.kind.attribute();
    let name = &operation.name;
    match (operation.kind.is_message(), operation.receiver) {
        (true, Receiver::Mutable) | (false, Receiver::Shared) => {}
        (true, Receiver::Shared) if operation.kind == Kind::Command => errors.at_span(
            operation.span,
            format!(
                "#[command] `{name}` takes `&self`, but a command may change the state and \
                 takes `&mut self`; an operation that only reads is a #[query]"
            ),
        ),
        (true, Receiver::Shared) => errors.at_span(
            operation.span,
            format!("#[{attribute}] `{name}` takes `&mut self`, like a command"),
        ),
        (false, Receiver::Mutable) => errors.at_span(
            operation.span,
            format!(
                "#[query] `{name}` takes `&mut self`, but a query only reads: take `&self`, or \
                 make it a #[command] to change the state"
            ),
        ),
        (_, Receiver::Owned) => errors.at_span(
            operation.span,
            format!(
                "#[{attribute}] `{name}` takes `self` by value; an operation borrows the state: \
                 take {}",
                expected_receiver(operation.kind)
            ),
        ),
        (_, Receiver::Missing) => errors.at_span(
            operation.span,
            format!(
                "#[{attribute}] `{name}` has no `self`; an operation runs on the actor's state: \
                 add {}",
                expected_receiver(operation.kind)
            ),
        ),
    }
    if let Some(turn) = &operation.turn {
        if operation.kind == Kind::Query && turn.mutable {
            errors.at_span(
                turn.span,
                format!(
                    "#[query] `{name}` takes `&mut Turn`, but a query cannot schedule or stage \
                     anything: take `turn: &Turn<Self>`"
                ),
            );
        }
        match &turn.actor {
            Some(Type::Path(path)) if path.path.is_ident("Self") || path.path.is_ident(actor) => {}
            Some(other) => errors.at(
                other,
                format!(
                    "this is the turn of another actor; `{name}` belongs to `{actor}`: use \
                     `Turn<Self>`"
                ),
            ),
            None => errors.at_span(turn.span, "name the actor of the turn: `Turn<Self>`"),
        }
    }
    let stored = operation.stored_name();
    if RESERVED.contains(&stored.as_str()) {
        errors.at_span(
            operation.span,
            format!(
                "`{name}` is already a method of every actor reference; rename the operation \
                 (reserved: {})",
                RESERVED.join(", ")
            ),
        );
    }
    if operation.kind == Kind::Reply && operation.arguments.len() != 1 {
        errors.at_span(
            operation.span,
            format!(
                "#[reply] `{name}` receives an effect's outcome as its one argument (after \
                 `&mut self` and the turn): `fn {name}(&mut self, receipt: Charged)` for an \
                 effect whose `Output` is `Charged`"
            ),
        );
    }
    let builder_names = match operation.kind {
        Kind::Command => RESERVED_FOR_COMMANDS,
        Kind::Reminder => RESERVED_FOR_REMINDERS,
        Kind::Query | Kind::Reply => &[],
    };
    if builder_names.contains(&stored.as_str()) {
        errors.at_span(
            operation.span,
            format!(
                "`{name}` is already a method of the builder a {} goes on; rename it \
                 (reserved for a {}: {})",
                operation.kind.attribute(),
                operation.kind.attribute(),
                builder_names.join(", ")
            ),
        );
    }
    for argument in &operation.arguments {
        check_argument_type(&argument.ty, errors);
    }
}

fn expected_receiver(kind: Kind) -> &'static str {
    if kind.is_message() {
        "`&mut self`"
    } else {
        "`&self`"
    }
}

/// Arguments are stored as JSON, so they must be owned, concrete types.
fn check_argument_type(ty: &Type, errors: &mut Errors) {
    match ty {
        Type::Reference(reference) => {
            let owned = match &*reference.elem {
                Type::Path(path) if path.path.is_ident("str") => "String".to_owned(),
                Type::Slice(slice) => {
                    format!("Vec<{}>", quote::ToTokens::to_token_stream(&slice.elem))
                }
                elem => quote::ToTokens::to_token_stream(elem).to_string(),
            };
            errors.at(
                ty,
                format!(
                    "arguments are stored in the message and must be owned: use `{owned}` \
                     instead of a reference"
                ),
            );
        }
        Type::ImplTrait(_) => errors.at(
            ty,
            "an argument needs one concrete type to be stored and read back: replace \
             `impl Trait` with a concrete type",
        ),
        _ => {
            let mut lifetimes = LifetimeFinder::default();
            lifetimes.visit_type(ty);
            if let Some(lifetime) = lifetimes.first {
                errors.at(
                    &lifetime,
                    format!(
                        "arguments are stored in the message and must be owned: remove the \
                         borrow `{lifetime}` (use `String` for `Cow<'_, str>`, for example)"
                    ),
                );
            }
        }
    }
}

#[derive(Default)]
struct LifetimeFinder {
    first: Option<syn::Lifetime>,
}

impl<'ast> Visit<'ast> for LifetimeFinder {
    fn visit_lifetime(&mut self, lifetime: &'ast syn::Lifetime) {
        if self.first.is_none() && lifetime.ident != "static" {
            self.first = Some(lifetime.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use quote::quote;
    use syn::parse_quote;

    use crate::errors::Errors;
    use crate::parse;

    /// Parses and checks an impl block; returns the surviving operations and the error count.
    fn checked(item: syn::ItemImpl) -> (Vec<String>, usize) {
        let mut item = item;
        let mut errors = Errors::default();
        let mut actor = parse::actor_impl(quote!(), &mut item, &mut errors);
        super::actor_impl(&mut actor, &mut errors);
        let names = actor
            .operations
            .iter()
            .map(|operation| operation.name.to_string())
            .collect();
        (names, errors.len())
    }

    #[test]
    fn every_mistake_is_reported_in_one_pass_and_the_good_operations_survive() {
        let (names, errors) = checked(parse_quote! {
            impl Show {
                #[query] fn seats(&mut self) -> u32 { 0 }
                #[command] fn greet(&mut self, name: &str) {}
                #[command] fn hold(&mut self, seats: u32) -> u32 { seats }
                #[reminder] fn put<T>(&mut self, item: T) {}
                fn helper(&self) {}
            }
        });
        assert_eq!(names, ["hold"]);
        assert_eq!(errors, 3);
    }

    #[test]
    fn a_query_may_take_a_shared_turn_and_a_command_a_mutable_one() {
        let (names, errors) = checked(parse_quote! {
            impl Show {
                #[query] fn seats(&self, turn: &Turn<Self>) -> u32 { 0 }
                #[command] fn hold(&mut self, turn: &mut Turn<Show>, seats: u32) {}
            }
        });
        assert_eq!((names.len(), errors), (2, 0));
    }

    #[test]
    fn a_reply_takes_the_outcome_as_its_one_argument() {
        let (names, errors) = checked(parse_quote! {
            impl Order {
                #[reply] fn charged(&mut self, turn: &mut Turn<Self>, receipt: Charged) {}
                #[reply] fn refunded(&mut self, id: String, cents: i64) {}
                #[reply] fn nothing(&mut self) {}
                #[reply] fn peeked(&self, receipt: Charged) {}
            }
        });
        assert_eq!(names, ["charged"]);
        assert_eq!(errors, 3);
    }

    #[test]
    fn the_turn_must_come_first_and_belong_to_this_actor() {
        let (names, errors) = checked(parse_quote! {
            impl Show {
                #[command] fn late(&mut self, seats: u32, turn: &mut Turn<Self>) {}
                #[command] fn other(&mut self, turn: &mut Turn<Venue>) {}
                #[query] fn writes(&self, turn: &mut Turn<Self>) {}
            }
        });
        assert!(names.is_empty());
        assert_eq!(errors, 3);
    }
}
