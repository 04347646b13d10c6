//! A query's body: the calls on its turn that only a command can make (schedule, send, emit,
//! destroy, the turn's transaction), each reported with the fix.
//!
//! rustc alone would say "cannot borrow `*turn` as mutable" and suggest `&mut Turn<Self>`,
//! which a query may not take. Each such call is reported here instead, and its receiver is
//! replaced by a turn that never exists (`__private::refused_turn`), so the rest of the body
//! is still checked and rustc adds no error of its own for the same mistake.

use proc_macro2::Ident;
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{Expr, ImplItemFn};

use crate::errors::Errors;

/// What each call on a turn that a query cannot make would have done.
const COMMANDS_ONLY: &[(&str, &str)] = &[
    ("schedule", "schedule a reminder"),
    ("schedule_every", "schedule a reminder"),
    ("unschedule", "cancel a reminder"),
    ("unschedule_all", "cancel a reminder"),
    ("reminder", "look up a reminder"),
    ("send", "send a message"),
    ("send_to_self", "send a message"),
    ("emit", "emit an effect"),
    ("destroy", "destroy its actor"),
    ("sqlite", "use the turn's transaction"),
    ("postgres", "use the turn's transaction"),
    ("mysql", "use the turn's transaction"),
];

/// Reports each call on `turn`, the turn parameter of the query `method`, that only a
/// command can make.
pub(crate) fn refuse_commands_only_calls(
    method: &mut ImplItemFn,
    turn: Ident,
    errors: &mut Errors,
) {
    let query = method.sig.ident.clone();
    let mut refuse = Refuse {
        turn,
        query,
        errors,
    };
    refuse.visit_block_mut(&mut method.block);
}

struct Refuse<'e> {
    turn: Ident,
    query: Ident,
    errors: &'e mut Errors,
}

impl VisitMut for Refuse<'_> {
    fn visit_expr_method_call_mut(&mut self, call: &mut syn::ExprMethodCall) {
        syn::visit_mut::visit_expr_method_call_mut(self, call);
        let on_the_turn = matches!(&*call.receiver, Expr::Path(path)
            if path.qself.is_none() && path.path.is_ident(&self.turn));
        let method = call.method.to_string();
        let commands_only = COMMANDS_ONLY.iter().find(|(name, _)| *name == method);
        let (true, Some((_, what))) = (on_the_turn, commands_only) else {
            return;
        };
        let (turn, query) = (&self.turn, &self.query);
        self.errors.at_span(
            call.method.span(),
            format!(
                "a #[query] cannot {what}: `{query}` reads the state and changes nothing. \
                 Call `{turn}.{method}(..)` from a #[command] (or a #[reminder]), which takes \
                 `{turn}: &mut Turn<Self>`"
            ),
        );
        let span = call.receiver.span();
        *call.receiver = syn::parse_quote_spanned!(span=>
            ::solid_objects::__private::refused_turn(#turn)
        );
    }
}
