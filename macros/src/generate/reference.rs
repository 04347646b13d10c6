//! The typed reference: `NameRef`, one async method per command and query.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;

use super::{caller_field, caller_parameter, Names};
use crate::model::{ActorImpl, Kind, Operation, Returns};

/// `NameRef` and `Name::reference(id)`.
pub(crate) fn reference(actor: &ActorImpl, names: &Names) -> TokenStream {
    let Names {
        actor: ident,
        reference,
        ..
    } = names;
    let doc = format!(
        "A typed reference to one [`{ident}`]: one method per command and query, plus \
         `snapshot()`, `id()`, `timeout(..)` and `context(..)`."
    );
    let constructor_doc = format!(
        "A reference to the `{ident}` with this id, through the process's default runtime."
    );
    let methods = actor
        .operations
        .iter()
        .filter(|operation| operation.kind != Kind::Reminder)
        .map(|operation| method(operation, names));
    quote! {
        #[doc = #doc]
        #[derive(Clone, Debug)]
        #[allow(private_interfaces)]
        pub struct #reference {
            inner: ::solid_objects::Reference<#ident>,
        }

        impl ::core::convert::From<::solid_objects::Reference<#ident>> for #reference {
            fn from(inner: ::solid_objects::Reference<#ident>) -> Self {
                Self { inner }
            }
        }

        impl #ident {
            #[doc = #constructor_doc]
            #[allow(dead_code)]
            pub fn reference(id: impl ::core::convert::Into<::std::string::String>) -> #reference {
                #reference::from(::solid_objects::Reference::new(id))
            }
        }

        #[allow(private_interfaces, dead_code)]
        impl #reference {
            /// How long calls through this reference wait for their turn (default: the
            /// runtime's sync timeout).
            pub fn timeout(self, timeout: ::core::time::Duration) -> Self {
                Self { inner: self.inner.timeout(timeout) }
            }

            /// The caller's context, given to the policy with each call.
            pub fn context(self, context: ::solid_objects::__private::serde_json::Value) -> Self {
                Self { inner: self.inner.context(context) }
            }

            /// The actor's id.
            pub fn id(&self) -> &str {
                self.inner.id()
            }

            /// The actor's committed state, read without a message and without creating it.
            pub async fn snapshot(&self) -> ::solid_objects::Result<#ident> {
                self.inner.snapshot().await
            }

            /// The untyped reference underneath, for code generic over actors.
            pub fn as_reference(&self) -> &::solid_objects::Reference<#ident> {
                &self.inner
            }

            #(#methods)*
        }
    }
}

fn method(operation: &Operation, names: &Names) -> TokenStream {
    let name = &operation.name;
    let vis = &operation.vis;
    let docs = &operation.docs;
    let variant = operation.variant();
    let parameters = operation.arguments.iter().map(caller_parameter);
    let fields = operation.arguments.iter().map(caller_field);
    let ok = match &operation.returns {
        Returns::Value(ty) | Returns::Result(ty) => ty,
    };
    let (enum_ident, entry) = if operation.kind == Kind::Query {
        (&names.query, quote!(ask))
    } else {
        (&names.message, quote!(call))
    };
    let message = quote!(#enum_ident::#variant { #(#fields),* });
    let body = quote_spanned!(ok.span()=> self.inner.#entry(#message).await);
    quote! {
        #(#docs)*
        #vis async fn #name(&self, #(#parameters),*) -> ::solid_objects::Result<#ok> {
            #body
        }
    }
}
