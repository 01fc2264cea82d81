//! The budget as a reservation, not a check: every attempt reserves its worst-case cost before
//! it is sent and gives the reservation back once its answer (with the real usage) is
//! counted. A call whose worst case does not fit in what the spent total and the calls in
//! flight leave of `[budget] max_usd` / `max_tokens` is refused before it is sent, so the
//! calls in flight can never together overspend the cap — ppol's own calls and the
//! simulators' through the model endpoint alike, since both go through
//! [`LlmClient::call`](super::LlmClient).
//!
//! The worst case of a request: its prompt at one token per byte of its text (messages,
//! tool calls and tool schemas; no tokenizer makes more tokens than bytes of text) plus
//! [`MESSAGE_OVERHEAD`] tokens per message for the chat template, and its completion at its
//! `max_tokens`, priced at the role's model's [`Price`](super::super::config::Price). The cap
//! holds for servers that honour `max_tokens` and report their usage: an answer whose usage is
//! over its worst case (a server that ignores `max_tokens`) is counted as reported, logged as a
//! warning, and leaves less for the next calls.

use super::super::{CallRole, ChatRequest};
use super::{LlmClient, RoleAccounting};

/// Template tokens counted per message on top of its text (role markers, separators).
pub const MESSAGE_OVERHEAD: u64 = 16;

/// What the calls in flight hold of the budget.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(super) struct Held {
    /// USD reserved.
    pub usd: f64,
    /// Tokens reserved.
    pub tokens: u64,
    /// Attempts holding a reservation.
    pub calls: u64,
}

/// The worst case of one attempt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorstCase {
    /// Tokens: the prompt's upper bound plus `max_tokens`.
    pub tokens: u64,
    /// Their cost at the role's prices.
    pub usd: f64,
}

/// An upper bound of the prompt tokens of `request` (see the [module docs](self)).
pub fn prompt_upper_bound(request: &ChatRequest) -> u64 {
    let messages: u64 = request
        .messages
        .iter()
        .map(|m| {
            let calls: usize = m
                .tool_calls
                .iter()
                .map(|c| c.name.len() + c.id.len() + c.arguments.to_string().len())
                .sum();
            (m.content.len() + calls) as u64 + MESSAGE_OVERHEAD
        })
        .sum();
    let tools: u64 = request
        .tools
        .iter()
        .map(|t| serde_json::to_string(t).map_or(0, |s| s.len() as u64) + MESSAGE_OVERHEAD)
        .sum();
    let schema = request
        .response_schema
        .as_ref()
        .and_then(|s| serde_json::to_string(s).ok())
        .map_or(0, |s| s.len() as u64);
    messages + tools + schema + MESSAGE_OVERHEAD
}

/// A reservation; dropping it gives it back.
pub(super) struct Reservation<'a> {
    client: &'a LlmClient,
    worst: WorstCase,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut held = self.client.lock_held();
        held.usd = (held.usd - self.worst.usd).max(0.0);
        held.tokens = held.tokens.saturating_sub(self.worst.tokens);
        held.calls = held.calls.saturating_sub(1);
        if held.calls == 0 {
            // no rounding left over once nothing is in flight
            *held = Held::default();
        }
        drop(held);
        self.client.inner.settled.notify_waiters();
    }
}

impl Reservation<'_> {
    /// The worst case this reservation holds.
    pub fn worst(&self) -> WorstCase {
        self.worst
    }
}

impl LlmClient {
    fn lock_held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.inner.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The worst case of sending `request` (as sent: its `max_tokens` set) for `role`.
    pub fn worst_case(&self, role: CallRole, request: &ChatRequest) -> WorstCase {
        let prompt = prompt_upper_bound(request);
        let completion = u64::from(
            request
                .max_tokens
                .unwrap_or_else(|| role.default_max_tokens()),
        );
        let price = self.price_of(role, None);
        WorstCase {
            tokens: prompt + completion,
            usd: price.cost(prompt, completion),
        }
    }

    /// Why calls stop: a call's worst case did not fit with nothing else in flight.
    pub(super) fn spent_for(&self) -> Option<String> {
        self.inner
            .spent_for
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Reserve the worst case of `request`. When it does not fit while other calls hold
    /// reservations, wait for them to settle (their real usage is usually below their worst
    /// case); when it does not fit with nothing in flight, the budget is spent: the call is
    /// refused with the reason, and so are new calls from then on.
    pub(super) async fn reserve(
        &self,
        role: CallRole,
        request: &ChatRequest,
    ) -> std::result::Result<Reservation<'_>, String> {
        loop {
            let settled = self.inner.settled.notified();
            tokio::pin!(settled);
            settled.as_mut().enable();
            match self.try_reserve(role, request) {
                Ok(r) => return Ok(r),
                Err((why, 0)) => {
                    let mut spent = self
                        .inner
                        .spent_for
                        .lock()
                        .unwrap_or_else(|e| e.into_inner());
                    spent.get_or_insert_with(|| why.clone());
                    return Err(why);
                }
                Err(_) => settled.await,
            }
        }
    }

    /// Reserve the worst case of `request` now, or say why the budget cannot take it (with the
    /// calls in flight): spent plus held plus this call would pass a cap.
    fn try_reserve(
        &self,
        role: CallRole,
        request: &ChatRequest,
    ) -> std::result::Result<Reservation<'_>, (String, u64)> {
        let worst = self.worst_case(role, request);
        let budget = self.inner.config.budget;
        // spent, then held: the order every path takes the two locks in
        let stats = self.lock_stats();
        let mut spent = RoleAccounting::default();
        for r in stats.values() {
            spent.add(r);
        }
        let mut held = self.lock_held();
        if let Some(max) = budget.max_usd {
            if spent.usd + held.usd + worst.usd > max {
                return Err((
                    format!(
                        "USD budget of ${max:.4}: ${:.4} spent and ${:.4} held by {} call(s) in \
                     flight leave ${:.4}, less than this call's worst case of ${:.4} (its prompt \
                     and max_tokens at the role's prices)",
                        spent.usd,
                        held.usd,
                        held.calls,
                        (max - spent.usd - held.usd).max(0.0),
                        worst.usd
                    ),
                    held.calls,
                ));
            }
        }
        if let Some(max) = budget.max_tokens {
            if spent.tokens() + held.tokens + worst.tokens > max {
                return Err((
                    format!(
                        "token budget of {max}: {} used and {} held by {} call(s) in flight leave \
                     {}, less than this call's worst case of {} tokens (its prompt and \
                     max_tokens)",
                        spent.tokens(),
                        held.tokens,
                        held.calls,
                        max.saturating_sub(spent.tokens() + held.tokens),
                        worst.tokens
                    ),
                    held.calls,
                ));
            }
        }
        held.usd += worst.usd;
        held.tokens += worst.tokens;
        held.calls += 1;
        drop(held);
        drop(stats);
        Ok(Reservation {
            client: self,
            worst,
        })
    }

    /// What the calls in flight hold of the budget now (USD, tokens, calls).
    pub fn budget_held(&self) -> (f64, u64, u64) {
        let h = *self.lock_held();
        (h.usd, h.tokens, h.calls)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialogue::{Role, Turn};

    #[test]
    fn the_prompt_bound_counts_every_byte_and_each_message() {
        let r = ChatRequest::new(
            CallRole::UserSim,
            vec![
                Turn::new(Role::System, "abcd"),
                Turn::new(Role::User, "héllo"),
            ],
        );
        // 4 + 6 bytes, two messages, the request's own overhead
        assert_eq!(prompt_upper_bound(&r), 10 + 3 * MESSAGE_OVERHEAD);
    }
}
