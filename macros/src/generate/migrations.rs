//! The state migrations: the `Actor::migration` lookup, and the constants that check the
//! chain against `#[actor(version = N)]` (known only where the struct is, so checked when
//! the two meet, at compile time).

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};

use crate::model::ActorImpl;

/// `fn migration(from) -> Option<Migration>`, inside `impl Actor`.
pub(crate) fn lookup(actor: &ActorImpl) -> TokenStream {
    if actor.migrations.is_empty() {
        return TokenStream::new();
    }
    let arms = actor.migrations.iter().map(|migration| {
        let from = migration.from;
        let name = &migration.name;
        let run = if migration.fallible {
            quote_spanned!(name.span()=> ::solid_objects::__private::migrate_fallible(state, Self::#name))
        } else {
            quote_spanned!(name.span()=> ::solid_objects::__private::migrate_infallible(state, Self::#name))
        };
        quote!(#from => ::core::option::Option::Some(|state| #run),)
    });
    quote! {
        fn migration(from: u32) -> ::core::option::Option<::solid_objects::__private::Migration> {
            match from {
                #(#arms)*
                _ => ::core::option::Option::None,
            }
        }
    }
}

/// Compile-time checks: every migration reads a version below the actor's, and the last one
/// leads to the actor's version; an actor above version 1 has migrations.
pub(crate) fn checks(actor: &ActorImpl) -> TokenStream {
    let ident = &actor.ident;
    let version = quote!(<#ident as ::solid_objects::ActorState>::VERSION);
    let below = actor.migrations.iter().map(|migration| {
        let from = migration.from;
        let message = format!(
            "`{}` migrates from version {from}, but that is not below the actor's version \
             (#[actor(version = N)] on the struct): raise the version to {} or remove the \
             migration",
            migration.name,
            from + 1
        );
        quote_spanned! {migration.from_span=>
            const _: () = ::core::assert!(#from < #version, #message);
        }
    });
    let last = actor
        .migrations
        .iter()
        .max_by_key(|migration| migration.from);
    let Some(last) = last else {
        if actor.migrates {
            // Every migration had errors of its own, already reported.
            return TokenStream::new();
        }
        let message = format!(
            "`{ident}` has a version above 1 (#[actor(version = N)] on the struct) but no \
             #[migrate(from = n)] function: states stored by earlier builds could never be \
             read; add the migrations from version 1, or remove the version"
        );
        return quote_spanned! {ident.span()=>
            const _: () = ::core::assert!(#version == 1, #message);
        };
    };
    let leads_to = last.from + 1;
    let message = format!(
        "the migrations end at version {leads_to}, below the actor's version (#[actor(version \
         = N)] on the struct): add #[migrate(from = {leads_to})], or lower the version to \
         {leads_to}"
    );
    let reaches = quote_spanned! {last.from_span=>
        const _: () = ::core::assert!(#leads_to >= #version, #message);
    };
    quote! {
        #(#below)*
        #reaches
    }
}
