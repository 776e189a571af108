//! Text a replica chose (an error message, a description, a version, a member id), made safe
//! to print: one line, no controls, no Unicode format characters (bidi overrides, zero-width
//! characters that can reorder or hide what follows), a bounded length. Whatever a replica
//! says becomes at most one line of the admin's output: it can neither start a line of its
//! own (a forged "QUORUM LOST" for another namespace's cluster) nor reorder one.

/// The longest replica message kept, in characters ("..." marks the cut).
pub const MESSAGE_CHARS: usize = 200;

/// The longest id or name accepted from a replica: a DNS name is at most 253 characters.
pub const ID_CHARS: usize = 253;

/// Unicode's format characters (general category Cf) and the line and paragraph separators:
/// invisible, and some of them reorder the text around them.
pub fn is_format(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{0600}'..='\u{0605}' | '\u{061C}' | '\u{06DD}' | '\u{070F}'
        | '\u{0890}'..='\u{0891}' | '\u{08E2}' | '\u{180E}'
        | '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}' | '\u{2060}'..='\u{2064}'
        | '\u{2066}'..='\u{206F}' | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFB}'
        | '\u{110BD}' | '\u{110CD}' | '\u{13430}'..='\u{1343F}' | '\u{1BCA0}'..='\u{1BCA3}'
        | '\u{1D173}'..='\u{1D17A}' | '\u{E0001}' | '\u{E0020}'..='\u{E007F}')
}

/// A character that must not reach a terminal as it is: a control (C0, DEL, C1) or a format
/// character.
pub fn is_unprintable(c: char) -> bool {
    c.is_control() || is_format(c)
}

/// `s` as one line: every run of whitespace, controls and format characters becomes one
/// space, the ends are trimmed, and it is cut at `max` characters (with "...").
pub fn one_line(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max * 4));
    let mut n = 0;
    let mut gap = false;
    for c in s.chars() {
        if c.is_whitespace() || is_unprintable(c) {
            gap = !out.is_empty();
            continue;
        }
        // The gap's space and the character both fit, or the line ends here.
        if n + usize::from(gap) >= max {
            out.push_str("...");
            return out;
        }
        if gap {
            out.push(' ');
            n += 1;
            gap = false;
        }
        out.push(c);
        n += 1;
    }
    out
}

/// A replica's message as one line of at most [`MESSAGE_CHARS`].
pub fn message(s: &str) -> String {
    one_line(s, MESSAGE_CHARS)
}

/// An id or name a replica gave, when it is one: printable, no whitespace, at most
/// [`ID_CHARS`]. Anything else is refused (never cleaned into another id, which could name
/// another member).
pub fn plain_id(s: &str) -> Result<&str, String> {
    if s.chars().count() > ID_CHARS {
        return Err(format!(
            "{:?} is longer than {ID_CHARS} characters",
            one_line(s, 40)
        ));
    }
    if s.chars().any(|c| c.is_whitespace() || is_unprintable(c)) {
        return Err(format!(
            "{:?} holds whitespace, control or format characters",
            one_line(s, 40)
        ));
    }
    Ok(s)
}

/// A Kubernetes object name (a DNS subdomain, RFC 1123): what a Secret's, a pod's or a
/// namespace's name must be. No '/', no `..`, so a name from an annotation or a review cannot
/// reach another path of the API.
pub fn is_object_name(s: &str) -> bool {
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.';
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    !s.is_empty()
        && s.len() <= 253
        && s.chars().all(ok_char)
        && alnum(s.chars().next())
        && alnum(s.chars().last())
        && !s.contains("..")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forged_line_stays_on_the_line_it_came_in() {
        let forged = "ok\n\rWARNING: QUORUM LOST in kube-system/etcd\u{2028}more\u{85}end";
        let l = message(forged);
        assert!(!l.contains('\n') && !l.contains('\r'), "{l:?}");
        assert_eq!(l, "ok WARNING: QUORUM LOST in kube-system/etcd more end");
    }

    #[test]
    fn bidi_and_zero_width_characters_go() {
        let s = "leader\u{202E}rewolloF\u{202C} \u{200B}x\u{2066}y\u{FEFF}";
        assert_eq!(message(s), "leader rewolloF x y");
        assert!(!message("\u{1b}[31mred\u{1b}[0m").contains('\u{1b}'));
    }

    #[test]
    fn long_messages_are_cut() {
        let l = one_line(&"a".repeat(1000), 10);
        assert_eq!(l, format!("{}...", "a".repeat(10)));
        assert_eq!(one_line("short", 10), "short");
        assert_eq!(one_line("  a \t b  ", 10), "a b");
    }

    #[test]
    fn ids_are_refused_not_cleaned() {
        assert_eq!(plain_id("etcd-1"), Ok("etcd-1"));
        assert!(plain_id("n1\nWARNING").is_err());
        assert!(plain_id("a\u{202E}b").is_err());
        assert!(plain_id("a b").is_err());
        assert!(plain_id(&"x".repeat(254)).is_err());
    }

    proptest::proptest! {
        /// Whatever a replica sends, the result is one printable line within the bound.
        #[test]
        fn any_text_becomes_one_printable_line(s in ".*", max in 1usize..300) {
            let l = one_line(&s, max);
            proptest::prop_assert!(!l.chars().any(|c| is_unprintable(c) || c == '\n'));
            proptest::prop_assert!(l.chars().count() <= max + 3);
        }
    }
}
