//! What the agent's last message asks or says, read by keyword: the identifiers it needs, a
//! yes/no confirmation, "anything else", a transfer, a refusal, a choice between options.

use super::facts::re;

/// A piece of information the agent can ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Need {
    Name,
    Zip,
    Email,
    UserId,
    OrderId,
    ReservationId,
    Payment,
}

/// What the agent's last message asks or says, by keyword.
#[derive(Debug, Default)]
pub(super) struct Intent {
    pub needs: Vec<Need>,
    pub confirm: bool,
    pub anything_else: bool,
    pub how_help: bool,
    pub transfer: bool,
    pub refusal: bool,
    pub question: bool,
    pub choice: bool,
}

pub(super) fn detect(agent: &str) -> Intent {
    let l = agent.to_lowercase();
    let mut needs = Vec::new();
    let user_id = re!(r"user ?id|user-id|username|user name|account id").is_match(&l);
    if re!(r"\b(?:full |first |last |your )?name\b").is_match(&l.replace("user name", "")) {
        needs.push(Need::Name);
    }
    if re!(r"\bzip|postal code|postcode").is_match(&l) {
        needs.push(Need::Zip);
    }
    if re!(r"e-?mail").is_match(&l) {
        needs.push(Need::Email);
    }
    if user_id {
        needs.push(Need::UserId);
    }
    if re!(r"order (?:id|number|#|no)|which order").is_match(&l) {
        needs.push(Need::OrderId);
    }
    if re!(r"reservation (?:id|number|code)|confirmation (?:number|code)|booking (?:reference|code|id|number)|which reservation").is_match(&l) {
        needs.push(Need::ReservationId);
    }
    if re!(r"payment method|how would you like to pay|which card").is_match(&l)
        && !l.contains("(yes/no)")
    {
        needs.push(Need::Payment);
    }
    let strong_confirm = re!(r"\(yes/no\)|proceed|go ahead").is_match(&l);
    Intent {
        confirm: (needs.is_empty() || strong_confirm) && re!(r"\(yes/no\)|shall i (?:proceed|go ahead)|should i (?:proceed|go ahead)|would you like (?:me )?to (?:proceed|go ahead)|do you want (?:me )?to (?:proceed|go ahead)|do you confirm|please confirm|can you confirm|could you confirm|confirm (?:that|this)|is that correct\?").is_match(&l),
        anything_else: l.contains("anything else"),
        how_help: re!(r"how (?:can|may) i (?:help|assist)|what can i (?:do|help)|what do you need help with|tell me what you need|what you need help with|how can i be of").is_match(&l),
        transfer: re!(r"transferring you|transfer you to|transferred to|i will now transfer|i'll transfer").is_match(&l)
            && !re!(r"would you like (?:me )?to transfer|do you want (?:me )?to transfer").is_match(&l),
        refusal: re!(r"unable to|not able to|cannot|can't|can not|not possible|not permitted|does not allow|doesn't allow|against (?:our )?policy").is_match(&l),
        question: l.trim_end().ends_with('?'),
        choice: re!(r"which one would you like|which option|which of (?:these|the) options|options:").is_match(&l),
        needs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intents_are_detected() {
        let i =
            detect("To locate your account, could you please share your full name and zip code?");
        assert_eq!(i.needs, vec![Need::Name, Need::Zip]);
        assert!(!i.confirm);
        let i = detect("I will cancel order #W1234567. Shall I proceed? (yes/no)");
        assert!(i.confirm);
        let i = detect("Could you confirm your user id?");
        assert!(!i.confirm && i.needs == vec![Need::UserId]);
        let i =
            detect("Done: you will receive an email. Is there anything else I can help you with?");
        assert!(i.anything_else);
        assert!(detect("I'm transferring you to a human agent.").transfer);
        assert!(!detect("Would you like me to transfer you to a human agent?").transfer);
        assert!(detect("Hi! How can I help you today?").how_help);
    }
}
