//! The real HTTP port, over reqwest. Errors never carry the URL: a Telegram bot token is
//! part of its path, and error text goes to logs and the run log.

use async_trait::async_trait;

use crate::adapters::http_error::describe;
use crate::ports::http::{HttpClient, HttpError, HttpRequest, HttpResponse};

pub struct ReqwestHttp {
    client: reqwest::Client,
}

impl ReqwestHttp {
    pub fn new() -> Self {
        // Each request names itself too (`HttpRequest::post_json`); this covers any other.
        let client = reqwest::Client::builder()
            .user_agent(crate::ports::http::USER_AGENT)
            .build()
            .unwrap_or_else(|_| reqwest::Client::new());
        Self { client }
    }
}

impl Default for ReqwestHttp {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl HttpClient for ReqwestHttp {
    async fn post(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        let mut builder = self.client.post(&request.url).timeout(request.timeout).body(request.body);
        for (name, value) in &request.headers {
            builder = builder.header(name, value);
        }
        let response = builder.send().await.map_err(|error| HttpError(describe(&error.without_url())))?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(name, value)| (name.as_str().to_ascii_lowercase(), value.to_str().unwrap_or("").to_owned()))
            .collect();
        let body = response.bytes().await.map_err(|error| HttpError(describe(&error.without_url())))?.to_vec();
        Ok(HttpResponse { status, headers, body })
    }
}
