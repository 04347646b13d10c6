//! The state struct: serde derives and the `ActorState` impl.

use proc_macro2::TokenStream;
use quote::{quote, ToTokens};
use syn::spanned::Spanned;
use syn::{ItemStruct, LitStr};

use crate::model::ActorState;

/// Re-emits the struct with serde derived for it, and implements `ActorState`.
pub(crate) fn state(state: &ActorState, item: &ItemStruct) -> TokenStream {
    let item = with_checked_fields(item);
    let ident = &state.ident;
    let stored_name = &state.stored_name;
    let max_attempts = state.max_attempts.map(|attempts| {
        quote!(const MAX_ATTEMPTS: ::core::option::Option<u32> = ::core::option::Option::Some(#attempts);)
    });
    let version = state
        .version
        .map(|version| quote!(const VERSION: u32 = #version;));
    let effects = (!state.effects.is_empty()).then(|| {
        let names = state.effects.iter().map(|effect| {
            quote::quote_spanned!(effect.span()=> <#effect as ::solid_objects::Effect>::NAME)
        });
        quote!(const EFFECTS: &'static [&'static str] = &[#(#names),*];)
    });
    // The one place the state's `Default` is named, spanned on the struct's name: a struct
    // without it gets one error there (serde's missing fields come from `initial` too).
    let initial =
        quote::quote_spanned!(ident.span()=> <Self as ::core::default::Default>::default());
    let initial_path = LitStr::new(
        &format!("<{ident} as ::solid_objects::ActorState>::initial"),
        ident.span(),
    );
    quote! {
        #[derive(
            ::solid_objects::__private::serde::Serialize,
            ::solid_objects::__private::serde::Deserialize
        )]
        #[serde(crate = "::solid_objects::__private::serde", default = #initial_path)]
        #item

        impl ::solid_objects::ActorState for #ident {
            const TYPE_NAME: &'static str = #stored_name;
            #max_attempts
            #version
            #effects

            fn initial() -> Self {
                #initial
            }
        }
    }
}

/// Each field without serde attributes of its own goes through `state_field`, serde's own
/// form under a bound whose message, spanned on the field's type, says what a field without
/// serde impls needs (rather than errors inside serde's generated code). The field's type is
/// named in the path, so rustc checks the bound there; a type that names `Self` (which in
/// serde's generated code would be another type) is left to serde.
fn with_checked_fields(item: &ItemStruct) -> ItemStruct {
    let mut item = item.clone();
    for field in &mut item.fields {
        if field.attrs.iter().any(|attr| attr.path().is_ident("serde")) || names_self(&field.ty) {
            continue;
        }
        let ty = field.ty.to_token_stream();
        let path = |function: &str| {
            LitStr::new(
                &format!("::solid_objects::__private::state_field::{function}::<{ty}, _>"),
                field.ty.span(),
            )
        };
        let (serialize, deserialize) = (path("serialize"), path("deserialize"));
        field.attrs.push(syn::parse_quote!(
            #[serde(serialize_with = #serialize, deserialize_with = #deserialize)]
        ));
    }
    item
}

fn names_self(ty: &syn::Type) -> bool {
    fn walk(tokens: TokenStream) -> bool {
        tokens.into_iter().any(|token| match token {
            proc_macro2::TokenTree::Ident(ident) => ident == "Self",
            proc_macro2::TokenTree::Group(group) => walk(group.stream()),
            _ => false,
        })
    }
    walk(ty.to_token_stream())
}
