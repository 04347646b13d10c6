//! The typed reference: `NameRef`, one async method per command and query.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};

use super::{caller_field, caller_parameter, Names};
use crate::model::{ActorImpl, Kind, Operation, Returns};

/// `NameRef` and `Name::reference(id)`.
pub(crate) fn reference(actor: &ActorImpl, names: &Names) -> TokenStream {
    let Names {
        actor: ident,
        reference,
        enqueue,
        ..
    } = names;
    let doc = format!(
        "A typed reference to one [`{ident}`]: one method per command and query, plus \
         `snapshot()`, `id()`, `timeout(..)` and `context(..)`."
    );
    let constructor_doc = format!(
        "A reference to the `{ident}` with this id, through the runtime of the enclosing \
         `runtime.scope(..)`, else the process default (`runtime.make_default()`)."
    );
    let methods = actor
        .operations
        .iter()
        .filter(|operation| operation.kind != Kind::Reminder)
        .map(|operation| method(operation, names));
    let enqueue_methods = actor
        .operations
        .iter()
        .filter(|operation| operation.kind == Kind::Command)
        .map(|operation| enqueue_method(operation, names));
    let enqueue_doc = format!(
        "Asynchronous calls to one [`{ident}`]: each command returns a `MessageRef` as soon as \
         its message is durable."
    );
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
            pub fn timeout(self, timeout: impl ::solid_objects::IntoDuration) -> Self {
                Self { inner: self.inner.timeout(timeout) }
            }

            /// The caller's context, given to the policy with each call.
            pub fn context(self, context: ::solid_objects::__private::serde_json::Value) -> Self {
                Self { inner: self.inner.context(context) }
            }

            /// Makes the next call idempotent under `key`: an actor that already has a message
            /// with that key answers with its result instead of running again.
            pub fn idempotency_key(self, key: impl ::core::convert::Into<::std::string::String>) -> Self {
                Self { inner: self.inner.idempotency_key(key) }
            }

            /// Calls that return as soon as the message is durable, with a `MessageRef`.
            pub fn enqueue(&self) -> #enqueue {
                #enqueue { inner: self.inner.enqueue_builder() }
            }

            /// The message this actor received under an idempotency key, if still kept.
            pub async fn message_with_key(
                &self,
                key: &str,
            ) -> ::solid_objects::Result<::core::option::Option<::solid_objects::MessageRef>> {
                self.inner.message_with_key(key).await
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

        #[doc = #enqueue_doc]
        #[derive(Debug)]
        #[must_use = "call one of the actor's commands on it, or nothing is enqueued"]
        #[allow(private_interfaces)]
        pub struct #enqueue {
            inner: ::solid_objects::Enqueue<#ident>,
        }

        #[allow(private_interfaces, dead_code)]
        impl #enqueue {
            /// At most one message per actor and key.
            pub fn idempotency_key(self, key: impl ::core::convert::Into<::std::string::String>) -> Self {
                Self { inner: self.inner.idempotency_key(key) }
            }

            /// Not run before `at`, by the runtime's clock.
            pub fn available_at(
                self,
                at: ::solid_objects::chrono::DateTime<::solid_objects::chrono::Utc>,
            ) -> Self {
                Self { inner: self.inner.available_at(at) }
            }

            /// Not run before `delay` from now, by the runtime's clock.
            pub fn delay(self, delay: impl ::solid_objects::IntoDuration) -> Self {
                Self { inner: self.inner.delay(delay) }
            }

            #(#enqueue_methods)*
        }
    }
}

fn enqueue_method(operation: &Operation, names: &Names) -> TokenStream {
    let name = &operation.name;
    let vis = &operation.vis;
    let docs = &operation.docs;
    let variant = operation.variant();
    let message_enum = &names.message;
    let parameters = operation.arguments.iter().map(caller_parameter);
    let fields = operation.arguments.iter().map(caller_field);
    let ok = match &operation.returns {
        Returns::Value(ty) | Returns::Result(ty) => ty,
    };
    quote! {
        #(#docs)*
        #vis async fn #name(
            &self,
            #(#parameters),*
        ) -> ::solid_objects::Result<::solid_objects::MessageRef<#ok>> {
            self.inner.send(#message_enum::#variant { #(#fields),* }).await
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
        (&names.query, "ask")
    } else {
        (&names.message, "call")
    };
    let entry = proc_macro2::Ident::new(entry, operation.returns_span);
    let message = quote!(#enum_ident::#variant { #(#fields),* });
    let body = quote_spanned!(operation.returns_span=> self.inner.#entry(#message).await);
    quote! {
        #(#docs)*
        #vis async fn #name(&self, #(#parameters),*) -> ::solid_objects::Result<#ok> {
            #body
        }
    }
}
