//! The typed reference: `NameRef`, one async method per command and query.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};

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
         `snapshot()`, `watch()`, `id()`, `timeout(..)` and `context(..)`."
    );
    let constructor_doc = format!(
        "A reference to the `{ident}` with this id, through the runtime of the enclosing \
         `runtime.scope(..)`, else the process default (`runtime.make_default()`)."
    );
    let for_key_doc = format!(
        "A reference to the `{ident}` that a create request under idempotency key `key` \
         makes, in `scope` (a tenant, a caller): its id comes from the two, and its calls carry \
         the key. See `Reference::for_key`."
    );
    let methods = actor
        .operations
        .iter()
        .filter(|operation| !operation.kind.is_internal())
        .map(|operation| method(operation, names));
    let enqueue_methods = actor
        .operations
        .iter()
        .filter(|operation| operation.kind == Kind::Command)
        .map(|operation| enqueue_method(operation, names));
    // Reminders and replies are run by the runtime only: a method of their name fails to
    // compile with a message that says so.
    let internal: Vec<&Operation> = actor
        .operations
        .iter()
        .filter(|operation| operation.kind.is_internal())
        .collect();
    let refusals = internal.iter().map(|operation| refusal(operation, names));
    let refused_methods: Vec<TokenStream> = internal
        .iter()
        .map(|operation| refused_method(operation, names, Refused::Awaited))
        .collect();
    // The enqueue builder has its own `delay`, `available_at` and `idempotency_key`: a
    // reminder or reply of that name keeps the builder's method there.
    let refused_enqueue_methods = internal
        .iter()
        .filter(|operation| !BUILDER_OPTIONS.contains(&operation.stored_name().as_str()))
        .map(|operation| refused_method(operation, names, Refused::Awaited));
    let enqueue_options = option_methods(
        "inner",
        [
            " At most one message per actor and key.",
            " Not run before `at`, by the runtime's clock.",
            " Not run before `delay` from now, by the runtime's clock.",
        ],
    );
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

            #[doc = #for_key_doc]
            #[allow(dead_code)]
            pub fn reference_for_key(
                scope: &str,
                key: impl ::core::convert::Into<::std::string::String>,
            ) -> #reference {
                #reference::from(::solid_objects::Reference::for_key(scope, key))
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

            /// Destroys the actor (its state, reminders and unfinished messages); its next
            /// message starts a new incarnation. Authorised by `Policy::authorize_destroy`.
            pub async fn destroy(&self) -> ::solid_objects::Result<()> {
                self.inner.destroy().await
            }

            /// Watches the actor: its committed state now, then each later one in revision
            /// order, ending with `Watched::Destroyed` if it is destroyed. Authorised by
            /// `Policy::authorize_subscription`. See `Reference::watch`.
            pub fn watch(&self) -> ::solid_objects::Watch<#ident> {
                self.inner.watch()
            }

            /// Watches what `project` makes of each committed state, skipping revisions
            /// whose projection did not change. See `Reference::watch_with`.
            pub fn watch_with<V, F>(&self, project: F) -> ::solid_objects::Watch<V>
            where
                F: ::core::ops::Fn(&#ident) -> V + ::core::marker::Send + 'static,
                V: ::core::cmp::PartialEq + ::core::clone::Clone + ::core::marker::Send + 'static,
            {
                self.inner.watch_with(project)
            }

            /// The actor's scheduled reminders, the next due first, for operators.
            /// Authorised as a query named `reminders`.
            pub async fn reminders(
                &self,
            ) -> ::solid_objects::Result<::std::vec::Vec<::solid_objects::ScheduledReminder>> {
                self.inner.reminders().await
            }

            /// The untyped reference underneath, for code generic over actors.
            pub fn as_reference(&self) -> &::solid_objects::Reference<#ident> {
                &self.inner
            }

            #(#methods)*

            #(#refused_methods)*
        }

        #(#refusals)*

        #[doc = #enqueue_doc]
        #[derive(Debug)]
        #[must_use = "call one of the actor's commands on it, or nothing is enqueued"]
        #[allow(private_interfaces)]
        pub struct #enqueue {
            inner: ::solid_objects::Enqueue<#ident>,
        }

        #[allow(private_interfaces, dead_code)]
        impl #enqueue {
            #enqueue_options

            #(#enqueue_methods)*

            #(#refused_enqueue_methods)*
        }
    }
}

/// The methods of the generated enqueue builder and sender besides the commands.
pub(crate) const BUILDER_OPTIONS: &[&str] = &["idempotency_key", "available_at", "delay"];

/// The [`BUILDER_OPTIONS`] methods of a generated builder that hands each option on to its
/// field `field`, documented with `docs` (in the order of [`BUILDER_OPTIONS`]).
pub(crate) fn option_methods(field: &str, docs: [&str; 3]) -> TokenStream {
    let field = format_ident!("{field}");
    let [key_doc, at_doc, delay_doc] = docs;
    quote! {
        #[doc = #key_doc]
        pub fn idempotency_key(
            self,
            key: impl ::core::convert::Into<::std::string::String>,
        ) -> Self {
            Self { #field: self.#field.idempotency_key(key) }
        }

        #[doc = #at_doc]
        pub fn available_at(
            self,
            at: ::solid_objects::chrono::DateTime<::solid_objects::chrono::Utc>,
        ) -> Self {
            Self { #field: self.#field.available_at(at) }
        }

        #[doc = #delay_doc]
        pub fn delay(self, delay: impl ::solid_objects::IntoDuration) -> Self {
            Self { #field: self.#field.delay(delay) }
        }
    }
}

/// The trait whose message says that a reminder or a reply is run by the runtime, not
/// called or sent. It has no implementation, so the bound that names it fails at the call,
/// with its message.
fn refusal_trait(operation: &Operation, names: &Names) -> proc_macro2::Ident {
    // The double underscores keep two actors' names apart (`Order` + `LineExpire` and
    // `OrderLine` + `Expire`): no CamelCase name holds them.
    let what = if operation.kind == Kind::Reply {
        "IsAnEffectReply"
    } else {
        "IsAReminder"
    };
    quote::format_ident!("{}__{}__{}", names.actor, operation.variant(), what)
}

/// The trait a refused call names in its error: what the operation is and how it runs.
fn refusal(operation: &Operation, names: &Names) -> TokenStream {
    let actor = &names.actor;
    let message_enum = &names.message;
    let name = &operation.name;
    let variant = operation.variant();
    let cfgs = &operation.cfgs;
    let trait_ident = refusal_trait(operation, names);
    let deliver = format!(
        "in a test, deliver it: `runtime.testing().deliver::<{actor}>(id, \
         {message_enum}::{variant} {{ .. }})`"
    );
    let (message, label, note) = if operation.kind == Kind::Reply {
        (
            format!(
                "`{name}` is an effect reply of `{actor}`: only the runtime delivers it, with \
                 the outcome of an effect `{actor}` emitted"
            ),
            "a reply is not called or sent, so no caller can forge an outcome".to_owned(),
            format!(
                "name it in one of `{actor}`'s handlers: \
                 `turn.emit(effect).on_success().{name}()` or `.on_failure().{name}()`; {deliver}"
            ),
        )
    } else {
        (
            format!("`{name}` is a reminder of `{actor}`: only `{actor}`'s own schedule runs it"),
            "a reminder is scheduled, not called or sent".to_owned(),
            format!(
                "schedule it from one of `{actor}`'s handlers: \
                 `turn.schedule(at, key).{name}(..)`; {deliver}"
            ),
        )
    };
    diagnostic_trait(cfgs, &trait_ident, [&message, &label, &note])
}

/// A hidden trait that generated code bounds a misuse by: an unmet bound is the error
/// `message` with its `label` and `note` (in that order), on the user's code.
pub(crate) fn diagnostic_trait(
    cfgs: &[syn::Attribute],
    trait_ident: &proc_macro2::Ident,
    [message, label, note]: [&str; 3],
) -> TokenStream {
    quote! {
        #(#cfgs)*
        #[doc(hidden)]
        #[allow(non_camel_case_types)]
        #[diagnostic::on_unimplemented(message = #message, label = #label, note = #note)]
        pub trait #trait_ident {}
    }
}

/// How a refused method would have been used: awaited (a reference's call, an enqueue) or
/// not (a sender's, which stages).
#[derive(Clone, Copy)]
pub(crate) enum Refused {
    Awaited,
    Staged,
}

/// A method named like the reminder or reply whose call fails to compile with the
/// refusal's message: its bound holds for no type, and naming the receiver's lifetime
/// defers the check to the call.
pub(crate) fn refused_method(
    operation: &Operation,
    names: &Names,
    refused: Refused,
) -> TokenStream {
    let name = &operation.name;
    let cfgs = &operation.cfgs;
    let parameters = operation.arguments.iter().map(caller_parameter);
    let trait_ident = refusal_trait(operation, names);
    let (output, body) = match refused {
        Refused::Awaited => (
            quote!(-> ::core::future::Ready<()>),
            quote!(::core::future::ready(())),
        ),
        Refused::Staged => (TokenStream::new(), TokenStream::new()),
    };
    quote! {
        #(#cfgs)*
        #[doc(hidden)]
        #[allow(unused_variables)]
        pub fn #name<'r>(&'r self, #(#parameters),*) #output
        where
            &'r Self: #trait_ident,
        {
            #body
        }
    }
}

fn enqueue_method(operation: &Operation, names: &Names) -> TokenStream {
    let name = &operation.name;
    let vis = &operation.vis;
    let docs = &operation.docs;
    let cfgs = &operation.cfgs;
    let variant = operation.variant();
    let message_enum = &names.message;
    let parameters = operation.arguments.iter().map(caller_parameter);
    let fields = operation.arguments.iter().map(caller_field);
    let ok = match &operation.returns {
        Returns::Value(ty) | Returns::Result(ty) => ty,
    };
    quote! {
        #(#cfgs)*
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
    let cfgs = &operation.cfgs;
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
        #(#cfgs)*
        #(#docs)*
        #vis async fn #name(&self, #(#parameters),*) -> ::solid_objects::Result<#ok> {
            #body
        }
    }
}
