//! The `Actor` impl: associated types and the dispatch `match`.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};

use super::Names;
use crate::model::{ActorImpl, Operation, Returns};

/// `impl Actor for Name`.
pub(crate) fn actor_trait(actor: &ActorImpl, names: &Names) -> TokenStream {
    let Names {
        actor: ident,
        message,
        query,
        reference,
        schedule,
        unschedule,
        sender,
        lookup,
        reply,
        ..
    } = names;
    let message_arms = actor
        .operations
        .iter()
        .filter(|operation| operation.kind.is_message())
        .map(|operation| arm(operation, message));
    let query_arms = actor
        .operations
        .iter()
        .filter(|operation| !operation.kind.is_message())
        .map(|operation| arm(operation, query));
    let migration = super::migrations::lookup(actor);
    quote! {
        impl ::solid_objects::Actor for #ident {
            type Message = #message;
            type Query = #query;
            type Schedule = #schedule;
            type Unschedule = #unschedule;
            type Sender = #sender;
            type ReminderLookup<'t> = #lookup<'t>;
            type EffectReply<E: ::solid_objects::Effect, T> = #reply<E, T>;

            fn handle<'a>(
                &'a mut self,
                _turn: &'a mut ::solid_objects::Turn<Self>,
                message: #message,
            ) -> impl ::core::future::Future<Output = ::solid_objects::__private::Handled>
                   + ::core::marker::Send + 'a {
                async move {
                    match message {
                        #(#message_arms)*
                    }
                }
            }

            fn answer<'a>(
                &'a self,
                _turn: &'a ::solid_objects::Turn<Self>,
                query: #query,
            ) -> impl ::core::future::Future<Output = ::solid_objects::__private::Handled>
                   + ::core::marker::Send + 'a {
                async move {
                    match query {
                        #(#query_arms)*
                    }
                }
            }

            fn schedule_builder(
                stage: ::solid_objects::__private::ScheduleStage<Self>,
            ) -> #schedule {
                #schedule { stage }
            }

            fn unschedule_builder(
                stage: ::solid_objects::__private::UnscheduleStage<Self>,
            ) -> #unschedule {
                #unschedule { stage }
            }

            fn sender(stage: ::solid_objects::__private::SendStage<Self>) -> #sender {
                #sender { stage }
            }

            fn reminder_lookup(
                stage: ::solid_objects::__private::ReminderLookup<'_, Self>,
            ) -> #lookup<'_> {
                #lookup { stage }
            }

            fn effect_reply<E: ::solid_objects::Effect, T>(
                stage: ::solid_objects::__private::ReplyStage<Self, E, T>,
            ) -> #reply<E, T> {
                #reply { stage }
            }

            fn register(
                registrar: &dyn ::solid_objects::__private::Registrar,
            ) -> ::solid_objects::Result<()> {
                ::solid_objects::__private::register::<Self>(registrar)
            }

            #migration
        }

        impl ::solid_objects::Addressable for #ident {
            type Reference = #reference;
        }
    }
}

/// One `match` arm: destructure the variant, call the method, wrap its outcome.
fn arm(operation: &Operation, enum_ident: &syn::Ident) -> TokenStream {
    let variant = operation.variant();
    let method = &operation.name;
    let fields: Vec<_> = operation.arguments.iter().map(|a| &a.name).collect();
    let turn = operation.turn.as_ref().map(|_| quote!(_turn,));
    let span = operation.returns_span;
    let call = if operation.is_async {
        quote_spanned!(span=> self.#method(#turn #(#fields),*).await)
    } else {
        quote_spanned!(span=> self.#method(#turn #(#fields),*))
    };
    let handled = match &operation.returns {
        Returns::Value(_) => {
            quote_spanned!(span=> ::solid_objects::__private::Handled::value(&#call))
        }
        Returns::Result(_) => {
            quote_spanned!(span=> ::solid_objects::__private::Handled::result(#call))
        }
    };
    let cfgs = &operation.cfgs;
    quote! {
        #(#cfgs)*
        #enum_ident::#variant { #(#fields),* } => #handled,
    }
}
