//! model -> tokens: one module per generated thing.

mod dispatch;
mod messages;
mod migrations;
mod reference;
mod schedule;
mod state;

use proc_macro2::{Ident, TokenStream};
use quote::{format_ident, quote};

use crate::model::{ActorImpl, Argument};

pub(crate) use state::state;

/// The names of the items generated for one actor.
pub(crate) struct Names {
    pub(crate) actor: Ident,
    pub(crate) message: Ident,
    pub(crate) query: Ident,
    pub(crate) reference: Ident,
    pub(crate) enqueue: Ident,
    pub(crate) schedule: Ident,
    pub(crate) unschedule: Ident,
    pub(crate) sender: Ident,
    pub(crate) lookup: Ident,
    pub(crate) reply: Ident,
}

impl Names {
    fn new(actor: &Ident) -> Self {
        Self {
            actor: actor.clone(),
            message: format_ident!("{}Message", actor),
            query: format_ident!("{}Query", actor),
            reference: format_ident!("{}Ref", actor),
            enqueue: format_ident!("{}Enqueue", actor),
            schedule: format_ident!("{}Schedule", actor),
            unschedule: format_ident!("{}Unschedule", actor),
            sender: format_ident!("{}Sender", actor),
            lookup: format_ident!("{}ReminderLookup", actor),
            reply: format_ident!("{}EffectReply", actor),
        }
    }
}

/// Everything generated from the `#[actor]` impl block.
pub(crate) fn actor_impl(actor: &ActorImpl) -> TokenStream {
    let names = Names::new(&actor.ident);
    let messages = messages::enums(actor, &names);
    let dispatch = dispatch::actor_trait(actor, &names);
    let reference = reference::reference(actor, &names);
    let schedule = schedule::builders(actor, &names);
    let migration_checks = migrations::checks(actor);
    quote! {
        #messages
        #dispatch
        #reference
        #schedule
        #migration_checks
    }
}

/// A parameter of a generated caller-facing method: `String` arguments take `impl Into<String>`.
fn caller_parameter(argument: &Argument) -> TokenStream {
    let name = &argument.name;
    let ty = &argument.ty;
    if is_string(ty) {
        quote!(#name: impl ::core::convert::Into<::std::string::String>)
    } else {
        quote!(#name: #ty)
    }
}

/// The field initialiser matching [`caller_parameter`].
fn caller_field(argument: &Argument) -> TokenStream {
    let name = &argument.name;
    if is_string(&argument.ty) {
        quote!(#name: ::core::convert::Into::into(#name))
    } else {
        quote!(#name)
    }
}

fn is_string(ty: &syn::Type) -> bool {
    matches!(ty, syn::Type::Path(path) if path.qself.is_none()
        && path.path.segments.last().is_some_and(|s| s.ident == "String" && s.arguments.is_empty()))
}
