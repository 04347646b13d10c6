#![doc = include_str!("../docs/guide.md")]

mod check;
mod errors;
mod generate;
mod model;
mod parse;
mod query_body;
mod reject;
mod rejection;

use proc_macro::TokenStream;
use quote::quote;
use syn::Item;

use crate::errors::Errors;

/// Makes a struct an actor's durable state, or an impl block its operations.
///
/// On the struct, it derives serde for the state (with `#[serde(default)]`, so state stored
/// before a field existed still loads) and records the stored type name:
/// `#[actor(name = "shows")]` (default: the struct's name). The struct must implement
/// `Default`: a new actor starts from it. `#[actor(effects(ChargeCard, SendReceipt))]`
/// declares the kinds of effect the actor emits: a runtime that runs effects refuses to
/// start without a handler for each.
///
/// On `impl Name { .. }`, the methods marked `#[command]`, `#[query]`, `#[reminder]` or
/// `#[reply]` become the actor's operations; it generates the message enums `NameMessage` and
/// `NameQuery`, the typed reference `NameRef` (from `Name::reference(id)`), and the schedule
/// builders used by `turn.schedule(at, key)` and `turn.unschedule(key)`.
#[proc_macro_attribute]
pub fn actor(args: TokenStream, input: TokenStream) -> TokenStream {
    let args = proc_macro2::TokenStream::from(args);
    let item = match syn::parse::<Item>(input) {
        Ok(item) => item,
        Err(error) => return error.to_compile_error().into(),
    };
    let mut errors = Errors::default();
    let output = match item {
        Item::Struct(mut item) => {
            let state = parse::state(args, &mut item, &mut errors);
            generate::state(&state, &item)
        }
        Item::Impl(item) if item.trait_.is_some() => {
            errors.at(
                &item.self_ty,
                "#[actor] goes on the actor's own impl block (`impl Name { .. }`), not on a \
                 trait impl",
            );
            quote!(#item)
        }
        Item::Impl(mut item) => {
            let mut actor = parse::actor_impl(args, &mut item, &mut errors);
            check::actor_impl(&mut actor, &mut errors);
            let generated = generate::actor_impl(&actor);
            quote!(#item #generated)
        }
        Item::Enum(item) => {
            errors.at(
                &item.ident,
                "#[actor] goes on a struct (the state) or on its impl block; to keep an enum \
                 as state, make it a field of a struct",
            );
            quote!(#item)
        }
        other => {
            errors.at(
                &other,
                "#[actor] goes on a struct (the state) or on its impl block (the operations)",
            );
            quote!(#other)
        }
    };
    let errors = errors.to_compile_errors();
    quote!(#output #errors).into()
}

/// Marks a method of an `#[actor]` impl block as a command: it takes `&mut self`, optionally
/// `turn: &mut Turn<Self>`, owned serialisable arguments, and returns a serialisable value or
/// `Result<T, Rejection>`.
#[proc_macro_attribute]
pub fn command(_args: TokenStream, input: TokenStream) -> TokenStream {
    outside_actor("command", input)
}

/// Marks a method of an `#[actor]` impl block as a query: it takes `&self`, optionally
/// `turn: &Turn<Self>`, and reads the state in mailbox order.
#[proc_macro_attribute]
pub fn query(_args: TokenStream, input: TokenStream) -> TokenStream {
    outside_actor("query", input)
}

/// Marks a method of an `#[actor]` impl block as a reminder: like a command, but only the
/// actor's own schedule (`turn.schedule(at, key).name(..)`) can invoke it.
#[proc_macro_attribute]
pub fn reminder(_args: TokenStream, input: TokenStream) -> TokenStream {
    outside_actor("reminder", input)
}

/// Marks a method of an `#[actor]` impl block as an effect reply: it receives the outcome of
/// an effect the actor emitted, named with `turn.emit(effect).on_success().name()` (or
/// `.on_failure()`), as its one argument.
///
/// Only the runtime delivers it: no reference, enqueue or other actor's turn can call it (a
/// compile error, and a typed reference's untyped form is refused at the door with
/// `Error::ReplyNotCallable`), so no caller can forge an outcome such as "paid". It takes
/// `&mut self`, optionally `turn: &mut Turn<Self>`, and the one argument.
#[proc_macro_attribute]
pub fn reply(_args: TokenStream, input: TokenStream) -> TokenStream {
    outside_actor("reply", input)
}

/// Marks a function of an `#[actor]` impl block as the migration of a stored state from one
/// version to the next: `#[migrate(from = 1)] fn from_v1(old: StateV1) -> Result<StateV2,
/// MigrationError>`. It takes the old state (any deserialisable type, or a
/// `serde_json::Value`) and returns the next version's (any serialisable type; the last
/// migration returns `Self`), with or without a `Result`. The migrations run in order, in
/// memory, whenever a state older than `#[actor(version = N)]` is read.
#[proc_macro_attribute]
pub fn migrate(_args: TokenStream, input: TokenStream) -> TokenStream {
    outside_actor("migrate", input)
}

/// Builds a `Rejection`: `reject!(not_enough_seats, "Only {} seats are left", left)`. The code
/// is an identifier in snake_case, checked at compile time; the rest is `format!` arguments.
#[proc_macro]
pub fn reject(input: TokenStream) -> TokenStream {
    match syn::parse::<reject::RejectInput>(input).and_then(reject::RejectInput::expand) {
        Ok(tokens) => tokens.into(),
        Err(error) => error.to_compile_error().into(),
    }
}

/// Derives typed rejections from an enum: each variant is a rejection whose stored code is
/// its name in snake_case (`NotEnoughSeats` -> `not_enough_seats`, or
/// `#[rejection(code = "..")]`), whose message is `#[rejection(message = "Only {left} left")]`
/// (the fields by name) or the code in words, and whose details are its fields. A command
/// returns `Result<T, HoldError>`; a caller gets it back from `error.rejection::<HoldError>()`.
#[proc_macro_derive(Rejection, attributes(rejection))]
pub fn derive_rejection(input: TokenStream) -> TokenStream {
    match syn::parse::<syn::DeriveInput>(input) {
        Ok(input) => rejection::derive(&input).into(),
        Err(error) => error.to_compile_error().into(),
    }
}

/// `#[command]` and friends only mean something inside an `#[actor]` impl block, which
/// removes them; reaching here means that block has no `#[actor]`.
fn outside_actor(name: &str, input: TokenStream) -> TokenStream {
    let input = proc_macro2::TokenStream::from(input);
    let message = format!(
        "#[{name}] works only inside an impl block marked #[actor]: add #[actor] above `impl ..`"
    );
    let error = syn::Error::new(proc_macro2::Span::call_site(), message).to_compile_error();
    quote!(#error #input).into()
}
