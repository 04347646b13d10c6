//! A query's body: the calls on its turn that only a command can make (schedule, send, emit,
//! destroy, the turn's transaction), each reported with the fix.
//!
//! rustc alone would say "cannot borrow `*turn` as mutable" and suggest `&mut Turn<Self>`,
//! which a query may not take. Each such call is reported here instead, and its receiver is
//! replaced by a turn that never exists (`__private::refused_turn`), so the rest of the body
//! is still checked and rustc adds no error of its own for the same mistake. A name of the
//! query's own that hides the turn's (a closure's parameter, a `let`, a loop's or a match
//! arm's pattern) is left alone where it is in scope.

use proc_macro2::Ident;
use syn::spanned::Spanned;
use syn::visit::Visit;
use syn::visit_mut::VisitMut;
use syn::{Expr, ImplItemFn, Pat};

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

impl Refuse<'_> {
    /// Whether `pattern` binds a name of its own equal to the turn's, which hides the turn
    /// where it is in scope.
    fn shadows(&self, pattern: &Pat) -> bool {
        struct Binds<'t> {
            name: &'t Ident,
            found: bool,
        }
        impl<'ast> Visit<'ast> for Binds<'_> {
            fn visit_pat_ident(&mut self, pattern: &'ast syn::PatIdent) {
                self.found |= pattern.ident == *self.name;
                syn::visit::visit_pat_ident(self, pattern);
            }
        }
        let mut binds = Binds {
            name: &self.turn,
            found: false,
        };
        binds.visit_pat(pattern);
        binds.found
    }
}

impl VisitMut for Refuse<'_> {
    /// A block's statements up to a `let` that binds the turn's name; the statements after it
    /// see that value, not the turn.
    fn visit_block_mut(&mut self, block: &mut syn::Block) {
        for statement in &mut block.stmts {
            if let syn::Stmt::Local(local) = statement {
                if let Some(init) = &mut local.init {
                    self.visit_local_init_mut(init);
                }
                if self.shadows(&local.pat) {
                    return;
                }
                continue;
            }
            self.visit_stmt_mut(statement);
        }
    }

    /// A closure whose parameters bind the turn's name sees its own value in its body.
    fn visit_expr_closure_mut(&mut self, closure: &mut syn::ExprClosure) {
        if closure.inputs.iter().any(|input| self.shadows(input)) {
            return;
        }
        syn::visit_mut::visit_expr_closure_mut(self, closure);
    }

    /// A `for` loop whose pattern binds the turn's name sees its own value in its body.
    fn visit_expr_for_loop_mut(&mut self, for_loop: &mut syn::ExprForLoop) {
        self.visit_expr_mut(&mut for_loop.expr);
        if !self.shadows(&for_loop.pat) {
            self.visit_block_mut(&mut for_loop.body);
        }
    }

    /// A match arm whose pattern binds the turn's name sees its own value.
    fn visit_arm_mut(&mut self, arm: &mut syn::Arm) {
        if !self.shadows(&arm.pat) {
            syn::visit_mut::visit_arm_mut(self, arm);
        }
    }

    /// An `if let` or `while let` whose pattern binds the turn's name: its condition's
    /// expression only.
    fn visit_expr_let_mut(&mut self, binding: &mut syn::ExprLet) {
        self.visit_expr_mut(&mut binding.expr);
    }

    fn visit_expr_if_mut(&mut self, branch: &mut syn::ExprIf) {
        self.visit_expr_mut(&mut branch.cond);
        let shadowed = matches!(&*branch.cond, Expr::Let(binding) if self.shadows(&binding.pat));
        if !shadowed {
            self.visit_block_mut(&mut branch.then_branch);
        }
        if let Some((_, otherwise)) = &mut branch.else_branch {
            self.visit_expr_mut(otherwise);
        }
    }

    fn visit_expr_while_mut(&mut self, looped: &mut syn::ExprWhile) {
        self.visit_expr_mut(&mut looped.cond);
        let shadowed = matches!(&*looped.cond, Expr::Let(binding) if self.shadows(&binding.pat));
        if !shadowed {
            self.visit_block_mut(&mut looped.body);
        }
    }

    /// A function declared inside the query cannot see the turn.
    fn visit_item_fn_mut(&mut self, _function: &mut syn::ItemFn) {}

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
