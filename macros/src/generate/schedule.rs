//! The typed builders a turn stages with: `turn.schedule(at, key).expire(..)`,
//! `turn.unschedule(key).expire()` and, from another actor, `turn.send::<Name>(id).hold(..)`.

use proc_macro2::{Ident, TokenStream};
use quote::quote;

use super::reference::{
    diagnostic_trait, option_methods, refused_method, Refused, BUILDER_OPTIONS,
};
use super::{caller_field, caller_parameter, Names};
use crate::model::{ActorImpl, Kind, Operation};

/// `NameSchedule`, `NameUnschedule` and `NameSender`, with one method per reminder (or
/// command). They hold no borrow of the turn, so their arguments may read it.
pub(crate) fn builders(actor: &ActorImpl, names: &Names) -> TokenStream {
    let Names {
        actor: ident,
        message,
        schedule,
        unschedule,
        sender,
        lookup,
        reply,
        ..
    } = names;
    let reminders: Vec<_> = actor
        .operations
        .iter()
        .filter(|operation| operation.kind == Kind::Reminder)
        .collect();
    let schedule_methods = reminders.iter().map(|reminder| {
        let doc = format!(
            "Schedules the reminder `{}` with these arguments.",
            reminder.name
        );
        staging_method(reminder, message, &doc)
    });
    let unschedule_methods = reminders.iter().map(|reminder| {
        let name = &reminder.name;
        let stored = reminder.stored_name();
        let doc = format!("Cancels the reminder `{name}` under this key.");
        let cfgs = &reminder.cfgs;
        quote! {
            #(#cfgs)*
            #[doc = #doc]
            pub fn #name(self) {
                self.stage.stage(#stored);
            }
        }
    });
    let lookup_methods = reminders.iter().map(|reminder| {
        let name = &reminder.name;
        let stored = reminder.stored_name();
        let doc = format!(
            "When the reminder `{name}` is due next under this key (`None` if it is not \
             scheduled), counting what this turn staged."
        );
        let cfgs = &reminder.cfgs;
        quote! {
            #(#cfgs)*
            #[doc = #doc]
            pub async fn #name(
                self,
            ) -> ::solid_objects::Result<
                ::core::option::Option<
                    ::solid_objects::chrono::DateTime<::solid_objects::chrono::Utc>,
                >,
            > {
                self.stage.due(#stored).await
            }
        }
    });
    // One method per reply (of one argument, as checked), on every builder of replies, bound
    // to the outcome type the reply's argument is: another outcome fails with a message that
    // names both types (rather than rustc's "no method named .. found", which may point at a
    // command of a similar name).
    let reply_impls = actor
        .operations
        .iter()
        .filter(|operation| operation.kind == Kind::Reply && operation.arguments.len() == 1)
        .map(|command| {
            let name = &command.name;
            let stored = command.stored_name();
            let argument = &command.arguments[0];
            let field = argument
                .name
                .to_string()
                .trim_start_matches("r#")
                .to_owned();
            let ty = &argument.ty;
            let doc = format!("Delivers the effect's outcome to `{name}` as its `{field}`.");
            let cfgs = &command.cfgs;
            let trait_ident = quote::format_ident!("{}__{}__Receives", ident, command.variant());
            let expected = type_text(ty);
            let message = format!(
                "the reply `{name}` of `{ident}` receives a `{expected}`, but this outcome is a \
                 `{{Self}}`"
            );
            let label = format!("`{name}` takes `{field}: {expected}`");
            let note = "`on_success()` delivers the effect's `Output`, and `on_failure()` an \
                        `EffectFailure<E>`: name a reply whose one argument is that type";
            let diagnostic = diagnostic_trait(cfgs, &trait_ident, [&message, &label, note]);
            quote! {
                #diagnostic

                #(#cfgs)*
                impl #trait_ident for #ty {}

                #(#cfgs)*
                impl<E: ::solid_objects::Effect, T> #reply<E, T> {
                    #[doc = #doc]
                    pub fn #name(self) -> ::solid_objects::Emitted<#ident, E>
                    where
                        T: #trait_ident,
                    {
                        self.stage.stage(#stored, #field)
                    }
                }
            }
        });
    let send_methods = actor
        .operations
        .iter()
        .filter(|operation| operation.kind == Kind::Command)
        .map(|command| {
            let doc = format!("Sends `{}` when the sending turn commits.", command.name);
            staging_method(command, message, &doc)
        });
    // A command named where a reply goes fails with a message that says to mark it
    // #[reply] (rather than rustc's bare "no method named .. found").
    let commands_named_as_replies = actor
        .operations
        .iter()
        .filter(|operation| operation.kind == Kind::Command)
        .map(|command| {
            let name = &command.name;
            let cfgs = &command.cfgs;
            let trait_ident = quote::format_ident!("{}__{}__IsACommand", ident, command.variant());
            let message = format!(
                "`{name}` is a command of `{ident}`, not a reply: only a `#[reply]` receives \
                 an effect's outcome"
            );
            let label = format!("mark `{name}` with #[reply] instead of #[command]");
            let note = "a reply is delivered by the runtime only, so no caller can forge the \
                        outcome; a command can be called by anyone the policy lets through";
            let diagnostic = diagnostic_trait(cfgs, &trait_ident, [&message, &label, note]);
            quote! {
                #diagnostic

                #(#cfgs)*
                #[allow(dead_code)]
                impl<E: ::solid_objects::Effect, T> #reply<E, T> {
                    #[doc(hidden)]
                    pub fn #name<'r>(&'r self)
                    where
                        &'r Self: #trait_ident,
                    {
                    }
                }
            }
        });
    // A reminder or reply is not sent either: its name fails with the message that says
    // why (unless the sender has a method of that name).
    let refused_send_methods = actor
        .operations
        .iter()
        .filter(|operation| {
            operation.kind.is_internal()
                && !BUILDER_OPTIONS.contains(&operation.stored_name().as_str())
        })
        .map(|operation| refused_method(operation, names, Refused::Staged));
    let send_options = option_methods(
        "stage",
        [
            " At most one message per target and key: a turn that runs again and sends under \
             the same key delivers once.",
            " Not run before `at`.",
            " Not run before `delay` after the sending turn's time. Until then it holds back \
             none of the target's other messages: it takes its turn once it is due.",
        ],
    );
    let sender_doc = format!(
        "Sends a command to a [`{ident}`] from another turn: `turn.send::<{ident}>(id).<command>(..)`."
    );
    let schedule_doc = format!(
        "Schedules one of [`{ident}`]'s reminders: `turn.schedule(at, key).<reminder>(..)`."
    );
    let reply_doc = format!(
        "Names the reply of [`{ident}`] an effect's outcome goes to: \
         `turn.emit(effect).on_success().<reply>()`; it has the `#[reply]` operations whose \
         one argument is a `T`."
    );
    let lookup_doc = format!(
        "Looks up one of [`{ident}`]'s reminders: `turn.reminder(key).<reminder>().await`."
    );
    let unschedule_doc =
        format!("Cancels one of [`{ident}`]'s reminders: `turn.unschedule(key).<reminder>()`.");
    quote! {
        #[doc = #schedule_doc]
        #[must_use = "call one of the actor's reminders on it, or nothing is scheduled"]
        #[allow(private_interfaces)]
        pub struct #schedule {
            stage: ::solid_objects::__private::ScheduleStage<#ident>,
        }

        #[allow(dead_code)]
        impl #schedule {
            /// For `turn.schedule_every(..)`: what to do with the occurrences missed while no
            /// runtime ran (`Missed::Latest`, the default, or `Missed::All`).
            pub fn missed(self, missed: ::solid_objects::Missed) -> Self {
                Self { stage: self.stage.missed(missed) }
            }

            #(#schedule_methods)*
        }

        #[doc = #unschedule_doc]
        #[must_use = "call one of the actor's reminders on it, or nothing is cancelled"]
        #[allow(private_interfaces)]
        pub struct #unschedule {
            stage: ::solid_objects::__private::UnscheduleStage<#ident>,
        }

        #[allow(dead_code)]
        impl #unschedule {
            #(#unschedule_methods)*
        }

        #[doc = #reply_doc]
        #[must_use = "call one of the actor's replies on it, or no reply is named"]
        #[allow(private_interfaces)]
        pub struct #reply<E: ::solid_objects::Effect, T> {
            stage: ::solid_objects::__private::ReplyStage<#ident, E, T>,
        }

        #(#reply_impls)*

        #(#commands_named_as_replies)*

        #[doc = #lookup_doc]
        #[must_use = "call one of the actor's reminders on it and await it"]
        #[allow(private_interfaces)]
        pub struct #lookup<'t> {
            stage: ::solid_objects::__private::ReminderLookup<'t, #ident>,
        }

        #[allow(dead_code)]
        impl #lookup<'_> {
            #(#lookup_methods)*
        }

        #[doc = #sender_doc]
        #[must_use = "call one of the actor's commands on it, or nothing is sent"]
        #[allow(private_interfaces)]
        pub struct #sender {
            stage: ::solid_objects::__private::SendStage<#ident>,
        }

        #[allow(dead_code)]
        impl #sender {
            #send_options

            #(#send_methods)*

            #(#refused_send_methods)*
        }
    }
}

/// A builder's method that stages `operation`'s message, built from the method's
/// arguments, documented with `doc`.
fn staging_method(operation: &Operation, message: &Ident, doc: &str) -> TokenStream {
    let name = &operation.name;
    let variant = operation.variant();
    let parameters = operation.arguments.iter().map(caller_parameter);
    let fields = operation.arguments.iter().map(caller_field);
    let cfgs = &operation.cfgs;
    quote! {
        #(#cfgs)*
        #[doc = #doc]
        pub fn #name(self, #(#parameters),*) {
            self.stage.stage(#message::#variant { #(#fields),* });
        }
    }
}

/// A type as a message shows it (`EffectFailure<ChargeCard>`, not `EffectFailure < ChargeCard >`),
/// with braces doubled for `#[diagnostic::on_unimplemented]`'s format strings.
fn type_text(ty: &syn::Type) -> String {
    let mut text = quote!(#ty).to_string();
    for (spaced, tight) in [
        (" < ", "<"),
        (" <", "<"),
        ("< ", "<"),
        (" >", ">"),
        (" :: ", "::"),
        (":: ", "::"),
        (" ,", ","),
        ("& ", "&"),
    ] {
        text = text.replace(spaced, tight);
    }
    text.replace('{', "{{").replace('}', "}}")
}
