//! `provider = "scripted"`: an offline LLM for demos and tests. It answers with its
//! configured replies in turn, cycling, and never touches the network. An empty reply
//! means "nothing to say", so the heartbeat stays silent.

use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;

use crate::ports::llm::{ChatRequest, ChatResponse, Llm, LlmError};

#[derive(Debug)]
pub struct ScriptedLlm {
    replies: Vec<String>,
    calls: AtomicUsize,
}

impl ScriptedLlm {
    pub fn new(replies: Vec<String>) -> Self {
        Self { replies, calls: AtomicUsize::new(0) }
    }
}

#[async_trait]
impl Llm for ScriptedLlm {
    async fn complete(&self, _request: ChatRequest) -> Result<ChatResponse, LlmError> {
        let call = self.calls.fetch_add(1, Ordering::Relaxed);
        let text = match self.replies.len() {
            0 => None,
            count => Some(self.replies[call % count].clone()),
        };
        Ok(ChatResponse { text, tool_calls: Vec::new(), usage: None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> ChatRequest {
        ChatRequest { model: None, messages: Vec::new(), tools: Vec::new().into() }
    }

    #[tokio::test]
    async fn cycles_through_its_replies() {
        let llm = ScriptedLlm::new(vec!["a".into(), String::new()]);
        let mut texts = Vec::new();
        for _ in 0..3 {
            texts.push(llm.complete(request()).await.map(|r| r.text));
        }
        assert_eq!(texts, vec![Ok(Some("a".into())), Ok(Some(String::new())), Ok(Some("a".into()))]);
        assert_eq!(ScriptedLlm::new(Vec::new()).complete(request()).await, Ok(ChatResponse::default()));
    }
}
