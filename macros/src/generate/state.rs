//! The state struct: serde derives and the `ActorState` impl.

use proc_macro2::TokenStream;
use quote::quote;
use syn::ItemStruct;

use crate::model::ActorState;

/// Re-emits the struct with serde derived for it, and implements `ActorState`.
pub(crate) fn state(state: &ActorState, item: &ItemStruct) -> TokenStream {
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
