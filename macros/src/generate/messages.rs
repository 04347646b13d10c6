//! The message enum (commands and reminders) and the query enum, with their serde form.

use proc_macro2::{Ident, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;

use super::Names;
use crate::model::{ActorImpl, Kind, Operation};

/// `NameMessage` and `NameQuery`, each implementing `Operations`.
pub(crate) fn enums(actor: &ActorImpl, names: &Names) -> TokenStream {
    let (messages, queries): (Vec<&Operation>, Vec<&Operation>) = actor
        .operations
        .iter()
        .partition(|operation| operation.kind.is_message());
    let message_doc = format!(
        "The durable messages of [`{}`]: one variant per command, reminder and reply.",
        names.actor
    );
    let query_doc = format!("The queries of [`{}`]: one variant per query.", names.actor);
    let message = operation_enum(&names.message, &message_doc, &messages);
    let query = operation_enum(&names.query, &query_doc, &queries);
    quote! {
        #message
        #query
    }
}

fn operation_enum(ident: &Ident, doc: &str, operations: &[&Operation]) -> TokenStream {
    let variants = operations.iter().map(|operation| {
        let variant = operation.variant();
        let stored = operation.stored_name();
        let cfgs = &operation.cfgs;
        let fields = operation.arguments.iter().map(|argument| {
            let name = &argument.name;
            let ty = &argument.ty;
            quote_spanned!(ty.span()=> #name: #ty)
        });
        quote! {
            #(#cfgs)*
            #[serde(rename = #stored)]
            #[allow(missing_docs)]
            #variant { #(#fields),* }
        }
    });
    let stored_names = operations.iter().map(|operation| stored_name(operation));
    let reminder_names = operations
        .iter()
        .filter(|operation| operation.kind == Kind::Reminder)
        .map(|operation| stored_name(operation));
    let reply_names = operations
        .iter()
        .filter(|operation| operation.kind == Kind::Reply)
        .map(|operation| stored_name(operation));
    let name_arms = operations.iter().map(|operation| {
        let variant = operation.variant();
        let stored = operation.stored_name();
        let cfgs = &operation.cfgs;
        quote!(#(#cfgs)* Self::#variant { .. } => #stored)
    });
    quote! {
        #[doc = #doc]
        #[derive(
            ::solid_objects::__private::serde::Serialize,
            ::solid_objects::__private::serde::Deserialize
        )]
        #[serde(
            crate = "::solid_objects::__private::serde",
            tag = "operation",
            content = "arguments"
        )]
        #[allow(private_interfaces)]
        pub enum #ident {
            #(#variants),*
        }

        impl ::solid_objects::Operations for #ident {
            const NAMES: &'static [&'static str] = &[#(#stored_names),*];
            const REMINDERS: &'static [&'static str] = &[#(#reminder_names),*];
            const REPLIES: &'static [&'static str] = &[#(#reply_names),*];

            fn name(&self) -> &'static str {
                match *self {
                    #(#name_arms,)*
                }
            }
        }
    }
}

/// An element of a list of stored names, under the operation's `#[cfg(..)]`.
fn stored_name(operation: &Operation) -> TokenStream {
    let stored = operation.stored_name();
    let cfgs = &operation.cfgs;
    quote!(#(#cfgs)* #stored)
}
