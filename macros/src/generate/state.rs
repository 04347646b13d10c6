//! The state struct: serde derives and the `ActorState` impl.

use proc_macro2::TokenStream;
use quote::quote;
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
    quote! {
        #[derive(
            ::solid_objects::__private::serde::Serialize,
            ::solid_objects::__private::serde::Deserialize
        )]
        #[serde(crate = "::solid_objects::__private::serde", default)]
        #item

        impl ::solid_objects::ActorState for #ident {
            const TYPE_NAME: &'static str = #stored_name;
            #max_attempts
            #version
        }
    }
}

/// Each field without serde attributes of its own goes through `state_field`, serde's own
/// form under a bound whose message, spanned on the field's type, says what a field without
/// serde impls needs (rather than errors inside serde's generated code).
fn with_checked_fields(item: &ItemStruct) -> ItemStruct {
    let mut item = item.clone();
    for field in &mut item.fields {
        if field.attrs.iter().any(|attr| attr.path().is_ident("serde")) {
            continue;
        }
        let with = LitStr::new(
            "::solid_objects::__private::state_field",
            field.ty.span(),
        );
        field.attrs.push(syn::parse_quote!(#[serde(with = #with)]));
    }
    item
}
