//! What the macros understand of the user's code, independent of syn's syntax tree shape.

use proc_macro2::{Ident, Span};
use syn::{Attribute, Type, Visibility};

/// The state struct under `#[actor]`.
pub(crate) struct ActorState {
    pub(crate) ident: Ident,
    /// The name stored in every row.
    pub(crate) stored_name: String,
    /// `#[actor(max_attempts = N)]`.
    pub(crate) max_attempts: Option<u32>,
    /// `#[actor(version = N)]`.
    pub(crate) version: Option<u32>,
    /// `#[actor(effects(ChargeCard, ..))]`: the kinds of effect the actor emits.
    pub(crate) effects: Vec<syn::Path>,
}

/// The impl block under `#[actor]`: the operations of one actor.
pub(crate) struct ActorImpl {
    /// The actor's struct name, from `impl Name`.
    pub(crate) ident: Ident,
    pub(crate) operations: Vec<Operation>,
    pub(crate) migrations: Vec<Migration>,
    /// Whether any function carries `#[migrate]`, even one with errors (then no check of
    /// the chain cascades from them).
    pub(crate) migrates: bool,
}

/// One `#[migrate(from = n)]` function: reads a state stored at version `from`, returns
/// version `from + 1`.
pub(crate) struct Migration {
    pub(crate) from: u32,
    /// Where errors about the version point: the `from = n` literal.
    pub(crate) from_span: Span,
    pub(crate) name: Ident,
    /// Whether it returns a `Result`.
    pub(crate) fallible: bool,
}

/// The four kinds of operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Command,
    Query,
    Reminder,
    /// An effect's outcome, delivered by the runtime only.
    Reply,
}

impl Kind {
    pub(crate) const ALL: [Kind; 4] = [Kind::Command, Kind::Query, Kind::Reminder, Kind::Reply];

    pub(crate) fn attribute(self) -> &'static str {
        match self {
            Kind::Command => "command",
            Kind::Query => "query",
            Kind::Reminder => "reminder",
            Kind::Reply => "reply",
        }
    }

    /// Whether only the runtime runs it (a reminder from the actor's schedule, a reply with
    /// an effect's outcome): no reference, enqueue or sender offers it.
    pub(crate) fn is_internal(self) -> bool {
        matches!(self, Kind::Reminder | Kind::Reply)
    }

    /// Whether the operation is a durable message (and so takes `&mut self`).
    pub(crate) fn is_message(self) -> bool {
        self != Kind::Query
    }
}

/// How a method takes `self`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Receiver {
    Shared,
    Mutable,
    Owned,
    Missing,
}

/// How a method takes the turn, if it does.
pub(crate) struct TurnParameter {
    pub(crate) mutable: bool,
    /// The type argument of `Turn<..>`, if any.
    pub(crate) actor: Option<Type>,
    pub(crate) span: Span,
}

/// One argument, stored in the message.
pub(crate) struct Argument {
    pub(crate) name: Ident,
    pub(crate) ty: Type,
}

/// What the method returns.
pub(crate) enum Returns {
    /// `T` (or nothing, which is `()`).
    Value(Type),
    /// `Result<T, E>`, where `E` rejects or fails.
    Result(Type),
}

/// One `#[command]`, `#[query]`, `#[reminder]` or `#[reply]` method.
pub(crate) struct Operation {
    pub(crate) kind: Kind,
    pub(crate) name: Ident,
    pub(crate) vis: Visibility,
    pub(crate) docs: Vec<Attribute>,
    /// The method's `#[cfg(..)]` attributes, carried onto everything generated for it.
    pub(crate) cfgs: Vec<Attribute>,
    pub(crate) is_async: bool,
    pub(crate) receiver: Receiver,
    pub(crate) turn: Option<TurnParameter>,
    pub(crate) arguments: Vec<Argument>,
    pub(crate) returns: Returns,
    /// The written return type (or the method name when there is none), where errors about
    /// the result point.
    pub(crate) returns_span: Span,
    /// Where errors about the whole method point: its name.
    pub(crate) span: Span,
}

impl Operation {
    /// The variant name in the message enum: `seats_left` -> `SeatsLeft`.
    pub(crate) fn variant(&self) -> Ident {
        let name = self.name.to_string();
        let camel: String = name
            .split('_')
            .filter(|part| !part.is_empty())
            .map(|part| {
                let mut chars = part.chars();
                chars
                    .next()
                    .map(|first| first.to_uppercase().chain(chars).collect::<String>())
                    .unwrap_or_default()
            })
            .collect();
        Ident::new(&camel, self.name.span())
    }

    /// The stored operation name: the method name without a raw prefix.
    pub(crate) fn stored_name(&self) -> String {
        self.name.to_string().trim_start_matches("r#").to_owned()
    }
}

#[cfg(test)]
mod tests {
    use syn::parse_quote;

    use crate::errors::Errors;
    use crate::model::Returns;
    use crate::parse;

    #[test]
    fn variants_are_camel_case_and_results_are_unwrapped() {
        let mut item: syn::ItemImpl = parse_quote! {
            impl Show {
                #[query] fn seats_left(&self) -> u32 { 0 }
                #[command] fn hold(&mut self) -> Result<Status, Rejection> { todo!() }
                #[command] fn open(&mut self) {}
            }
        };
        let mut errors = Errors::default();
        let actor = parse::actor_impl(quote::quote!(), &mut item, &mut errors);
        let variants: Vec<String> = actor
            .operations
            .iter()
            .map(|operation| operation.variant().to_string())
            .collect();
        assert_eq!(variants, ["SeatsLeft", "Hold", "Open"]);
        assert!(
            matches!(&actor.operations[1].returns, Returns::Result(ok) if *ok == parse_quote!(Status))
        );
        assert!(
            matches!(&actor.operations[2].returns, Returns::Value(unit) if *unit == parse_quote!(()))
        );
        assert_eq!(errors.len(), 0);
        assert!(
            item.items.iter().all(|member| match member {
                syn::ImplItem::Fn(method) => method.attrs.is_empty(),
                _ => true,
            }),
            "the operation attributes are removed"
        );
    }
}
