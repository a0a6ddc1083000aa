//! An HTTP client error in words that keep its root cause: reqwest's own message says
//! "error sending request", and only its sources say "connection refused" or "failed to
//! lookup address", which is what a user acts on.

/// The error and each of its sources, joined with ": ", repeats left out.
pub fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = vec![error.to_string()];
    let mut cause = error.source();
    while let Some(source) = cause {
        let text = source.to_string();
        if !parts.iter().any(|part| part.contains(&text)) {
            parts.push(text);
        }
        cause = source.source();
    }
    parts.join(": ")
}
