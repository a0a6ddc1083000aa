//! Which tools a timed run may use (ADR 0019). Tools come from servers (MCP servers by
//! their config name, native tools by the namespace their library gives them) and are
//! named `server/tool`. An agent lists what it may use; a job may narrow that list; a
//! run gets only tools the operator marked read-only, plus the tools that may write that
//! the job opted into (always within the agent's list). What a server says about its own
//! tools (`readOnlyHint`) is a hint, never trusted unless the operator says so. Pure: the
//! caller hands in what the servers offer now.

use std::collections::BTreeMap;
use std::fmt;

use crate::core::tool_check::ToolCheck;

/// The longest server or tool name accepted (a model's function names are at most 64
/// characters, and a tool's offered name joins both).
pub const TOOL_NAME_CHARS_MAX: usize = 64;

/// `server/tool`: a tool of one server.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ToolName {
    pub server: String,
    pub tool: String,
}

impl ToolName {
    pub fn new(server: impl Into<String>, tool: impl Into<String>) -> Self {
        Self { server: server.into(), tool: tool.into() }
    }

    /// Reads `server/tool`.
    ///
    /// # Errors
    /// The problem in words when it is not two valid names joined by `/`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (server, tool) =
            text.split_once('/').ok_or_else(|| format!("{text:?} is not `server/tool` (like \"inbox/search\")"))?;
        check_server_name(server)?;
        check_tool_name(tool).map_err(|problem| format!("{text:?}: {problem}"))?;
        Ok(Self::new(server, tool))
    }
}

/// The longest function name OpenAI-compatible endpoints take.
const MODEL_NAME_CHARS_MAX: usize = 64;

impl ToolName {
    /// The name the model calls it by: `server__tool` in the alphabet function names
    /// allow (`[A-Za-z0-9_-]`, at most 64), so it never meets a built-in tool's name. A
    /// name too long keeps its start and gets a digest of the whole, so two stay apart.
    pub fn model_name(&self) -> String {
        let tool: String = self.tool.chars().map(|c| if c == '.' { '_' } else { c }).collect();
        let name = format!("{}__{tool}", self.server);
        if name.len() <= MODEL_NAME_CHARS_MAX && tool == self.tool {
            return name;
        }
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(self.to_string().as_bytes());
        let suffix = crate::core::hex::lower_hex(&digest[..4]);
        let keep = MODEL_NAME_CHARS_MAX - suffix.len() - 1;
        format!("{}_{suffix}", &name[..name.len().min(keep)])
    }
}

impl fmt::Display for ToolName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.server, self.tool)
    }
}

/// A server's name: `[a-z0-9-]`, 1 to 32 characters (it prefixes every tool it offers).
///
/// # Errors
/// The problem in words.
pub fn check_server_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= 32
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if valid {
        Ok(())
    } else {
        Err(format!("server name {name:?} must be 1 to 32 of a-z, 0-9 and '-'"))
    }
}

/// A tool's name as servers give them: 1 to 64 of `A-Za-z0-9_-.`
///
/// # Errors
/// The problem in words.
pub fn check_tool_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= TOOL_NAME_CHARS_MAX
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if valid {
        Ok(())
    } else {
        Err(format!("tool name {name:?} must be 1 to {TOOL_NAME_CHARS_MAX} of A-Z, a-z, 0-9, '_', '-' and '.'"))
    }
}

/// `server/tool`, `server/*` (every tool of a server), or `server/prefix*`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ToolPattern {
    pub server: String,
    /// The tool's name, or the prefix before a trailing `*` (empty: every tool).
    pub tool: String,
    pub wildcard: bool,
}

impl ToolPattern {
    /// Reads a pattern as a config or a model writes it.
    ///
    /// # Errors
    /// The problem in words.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (server, tool) =
            text.split_once('/').ok_or_else(|| format!("{text:?} is not `server/tool` or `server/*`"))?;
        check_server_name(server)?;
        let (tool, wildcard) = match tool.strip_suffix('*') {
            Some(prefix) => (prefix, true),
            None => (tool, false),
        };
        if !(wildcard && tool.is_empty()) {
            check_tool_name(tool).map_err(|problem| format!("{text:?}: {problem}"))?;
        }
        Ok(Self { server: server.to_owned(), tool: tool.to_owned(), wildcard })
    }

    pub fn matches(&self, name: &ToolName) -> bool {
        self.server == name.server
            && if self.wildcard { name.tool.starts_with(&self.tool) } else { name.tool == self.tool }
    }

    /// Whether every tool this pattern matches is also matched by one of `within`.
    pub fn is_within(&self, within: &[ToolPattern]) -> bool {
        within.iter().any(|outer| {
            outer.server == self.server
                && if outer.wildcard {
                    self.tool.starts_with(&outer.tool)
                } else {
                    !self.wildcard && outer.tool == self.tool
                }
        })
    }
}

impl fmt::Display for ToolPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}{}", self.server, self.tool, if self.wildcard { "*" } else { "" })
    }
}

/// Whether any of `patterns` matches `name`.
pub fn any_matches(patterns: &[ToolPattern], name: &ToolName) -> bool {
    patterns.iter().any(|pattern| pattern.matches(name))
}

/// What a job says about tools (a heartbeat, a cron job, an agent heartbeat).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobTools {
    /// Narrows the agent's list; `None`: the agent's whole list.
    pub allow: Option<Vec<ToolPattern>>,
    /// Tools that may write, opted into for this job (still within the agent's list).
    pub write: Vec<ToolPattern>,
    /// Tools the run cannot do without: if one is not offered, the run fails naming it.
    pub required: Vec<ToolName>,
    /// The zero-token pre-check: a tool called before the model (ADR 0021). Required too.
    pub check: Option<ToolCheck>,
}

/// A definition's tools, as a definition holds them: nothing for the many jobs that say
/// nothing about tools, else one shared allocation. A `JobTools` inline was 144 of a
/// definition's 352 bytes, held for every stored heartbeat (ADR 0045).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SharedJobTools(Option<std::sync::Arc<JobTools>>);

/// What a job that says nothing about tools reads.
static NO_JOB_TOOLS: JobTools = JobTools { allow: None, write: Vec::new(), required: Vec::new(), check: None };

impl std::ops::Deref for SharedJobTools {
    type Target = JobTools;

    fn deref(&self) -> &JobTools {
        self.0.as_deref().unwrap_or(&NO_JOB_TOOLS)
    }
}

impl From<JobTools> for SharedJobTools {
    fn from(tools: JobTools) -> Self {
        Self((!tools.is_default()).then(|| std::sync::Arc::new(tools)))
    }
}

// As the tools themselves, so that a definition prints (and a trace hashes) as before.
impl fmt::Debug for SharedJobTools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl JobTools {
    /// Whether the job says nothing about tools.
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// A canonical one-line form, for the definition's fingerprint and the store.
    pub fn canonical(&self) -> String {
        let join = |patterns: &[String]| patterns.join(",");
        let allow = self.allow.as_ref().map_or_else(|| "agent".to_owned(), |p| join(&strings(p)));
        let mut canonical = format!(
            "allow={allow};write={};required={}",
            join(&strings(&self.write)),
            join(&self.required.iter().map(ToString::to_string).collect::<Vec<_>>())
        );
        // Only when set, so a job without a check keeps the form (and fingerprint) it had.
        if let Some(check) = &self.check {
            canonical.push_str(&format!(";check={} {}", check.tool, check.arguments_text()));
        }
        canonical
    }

    /// The tools a run must have: the required ones and the check's.
    pub fn needed(&self) -> impl Iterator<Item = &ToolName> {
        let check = self.check.as_ref().map(|check| &check.tool);
        self.required.iter().chain(check.filter(|tool| !self.required.contains(tool)))
    }

    /// The job's patterns that reach past the agent's list, named for a refusal.
    pub fn beyond(&self, agent: &[ToolPattern]) -> Vec<String> {
        let allow = self.allow.iter().flatten().chain(&self.write);
        let mut beyond: Vec<String> =
            allow.filter(|pattern| !pattern.is_within(agent)).map(ToString::to_string).collect();
        beyond.extend(self.needed().filter(|name| !any_matches(agent, name)).map(ToString::to_string));
        beyond
    }

    /// Adds a job's pre-check (`check_tool`, `check_arguments`), which must be a tool the
    /// job may use: within the agent's list and the job's own.
    ///
    /// # Errors
    /// `("check_tool", problem)` when the job could never call it.
    pub fn with_check(
        mut self,
        check: Option<ToolCheck>,
        agent: &[ToolPattern],
    ) -> Result<Self, (&'static str, String)> {
        if let Some(check) = &check {
            let tool = &check.tool;
            if !any_matches(agent, tool) {
                let agent = strings(agent);
                let agent = if agent.is_empty() { "none".to_owned() } else { agent.join(", ") };
                return Err(("check_tool", format!("{tool} is not in the agent's `tools` list ({agent})")));
            }
            if let Some(allow) = &self.allow {
                if !any_matches(allow, tool) {
                    return Err(("check_tool", format!("{tool} is not in the job's `tools` list")));
                }
            }
        }
        self.check = check;
        Ok(self)
    }
}

impl JobTools {
    /// A job's tool fields as users write them (`tools`, `write_tools`, `required_tools`),
    /// checked against the agent's list: a job can only narrow it.
    ///
    /// # Errors
    /// `(field, problem)` for the first field at fault.
    pub fn from_fields(
        allow: Option<&[String]>,
        write: Option<&[String]>,
        required: Option<&[String]>,
        agent: &[ToolPattern],
    ) -> Result<Self, (&'static str, String)> {
        let patterns = |field: &'static str, texts: &[String]| -> Result<Vec<ToolPattern>, (&'static str, String)> {
            texts.iter().map(|text| ToolPattern::parse(text).map_err(|problem| (field, problem))).collect()
        };
        let tools = JobTools {
            allow: allow.map(|texts| patterns("tools", texts)).transpose()?,
            write: patterns("write_tools", write.unwrap_or_default())?,
            required: required
                .unwrap_or_default()
                .iter()
                .map(|text| ToolName::parse(text).map_err(|problem| ("required_tools", problem)))
                .collect::<Result<_, _>>()?,
            check: None,
        };
        let beyond = tools.beyond(agent);
        if !beyond.is_empty() {
            let field = if tools.allow.iter().flatten().any(|p| beyond.contains(&p.to_string())) {
                "tools"
            } else if tools.write.iter().any(|p| beyond.contains(&p.to_string())) {
                "write_tools"
            } else {
                "required_tools"
            };
            let agent: Vec<String> = strings(agent);
            let agent = if agent.is_empty() { "none".to_owned() } else { agent.join(", ") };
            return Err((
                field,
                format!(
                    "{} reach past the agent's `tools` list ({agent}); a job can only narrow it",
                    beyond.join(", ")
                ),
            ));
        }
        Ok(tools)
    }
}

/// The stored form of [`JobTools`]: its fields as users write them.
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredJobTools {
    allow: Option<Vec<String>>,
    #[serde(default)]
    write: Vec<String>,
    #[serde(default)]
    required: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    check: Option<StoredCheck>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct StoredCheck {
    tool: String,
    #[serde(default)]
    arguments: serde_json::Map<String, serde_json::Value>,
}

impl JobTools {
    /// The JSON the stores keep (`None` for a job that says nothing about tools).
    pub fn to_json(&self) -> Option<String> {
        if self.is_default() {
            return None;
        }
        let stored = StoredJobTools {
            allow: self.allow.as_deref().map(strings),
            write: strings(&self.write),
            required: self.required.iter().map(ToString::to_string).collect(),
            check: self
                .check
                .as_ref()
                .map(|check| StoredCheck { tool: check.tool.to_string(), arguments: check.arguments.clone() }),
        };
        serde_json::to_string(&stored).ok()
    }

    /// Reads what [`JobTools::to_json`] wrote.
    ///
    /// # Errors
    /// The problem in words when the text is not that.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let stored: StoredJobTools = serde_json::from_str(text).map_err(|error| error.to_string())?;
        let patterns = |texts: &[String]| texts.iter().map(|t| ToolPattern::parse(t)).collect::<Result<Vec<_>, _>>();
        Ok(JobTools {
            allow: stored.allow.as_deref().map(patterns).transpose()?,
            write: patterns(&stored.write)?,
            required: stored.required.iter().map(|t| ToolName::parse(t)).collect::<Result<_, _>>()?,
            check: stored
                .check
                .map(|check| ToolName::parse(&check.tool).map(|tool| ToolCheck { tool, arguments: check.arguments }))
                .transpose()?,
        })
    }
}

fn strings(patterns: &[ToolPattern]) -> Vec<String> {
    patterns.iter().map(ToString::to_string).collect()
}

/// A tool a server offers now, and whether the operator (or, for a native tool, the code
/// that registered it) says it only reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfferedTool {
    pub name: ToolName,
    pub read_only: bool,
}

/// Why a required tool is not in a run's set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// No server offers it now (not connected, or not in its list).
    NotOffered { tool: ToolName, why: String },
    /// Offered, but the policy keeps it from this job.
    NotAllowed { tool: ToolName, why: String },
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Missing::NotOffered { tool, why } => write!(f, "required tool {tool} is unavailable: {why}"),
            Missing::NotAllowed { tool, why } => write!(f, "required tool {tool} is not allowed: {why}"),
        }
    }
}

/// The tools one run gets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunTools {
    pub offered: Vec<OfferedTool>,
    /// Required tools the run does not have: it must fail naming them.
    pub missing: Vec<Missing>,
}

/// Decides a run's tools: `available` (what the servers offer now), the agent's list and
/// the job's. `server_down` says why a server offers nothing, when it is down.
pub fn tools_for_run(
    agent: &[ToolPattern],
    job: &JobTools,
    available: &[OfferedTool],
    server_down: impl Fn(&str) -> Option<String>,
) -> RunTools {
    let allowed = |name: &ToolName| -> Result<(), String> {
        if !any_matches(agent, name) {
            return Err("the agent's `tools` list does not include it".to_owned());
        }
        if let Some(allow) = &job.allow {
            if !any_matches(allow, name) {
                return Err("the job's `tools` list does not include it".to_owned());
            }
        }
        Ok(())
    };
    let mut offered = Vec::new();
    let mut why_refused = BTreeMap::new();
    for tool in available {
        let verdict = allowed(&tool.name).and_then(|()| {
            if tool.read_only || any_matches(&job.write, &tool.name) {
                Ok(())
            } else {
                Err("it may write (the operator has not marked it read-only) and the job has not opted into \
                     it with `write_tools`"
                    .to_owned())
            }
        });
        match verdict {
            Ok(()) => offered.push(tool.clone()),
            Err(why) => {
                why_refused.insert(tool.name.clone(), why);
            }
        }
    }
    let missing = job
        .needed()
        .filter(|name| !offered.iter().any(|tool| tool.name == **name))
        .map(|name| match why_refused.get(name) {
            Some(why) => Missing::NotAllowed { tool: name.clone(), why: why.clone() },
            None => Missing::NotOffered {
                tool: name.clone(),
                why: server_down(&name.server)
                    .unwrap_or_else(|| format!("server {} does not list a tool {:?}", name.server, name.tool)),
            },
        })
        .collect();
    RunTools { offered, missing }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patterns(texts: &[&str]) -> Vec<ToolPattern> {
        texts.iter().map(|text| ToolPattern::parse(text).expect("valid")).collect()
    }

    fn tool(name: &str, read_only: bool) -> OfferedTool {
        OfferedTool { name: ToolName::parse(name).expect("valid"), read_only }
    }

    fn names(run: &RunTools) -> Vec<String> {
        run.offered.iter().map(|tool| tool.name.to_string()).collect()
    }

    #[test]
    fn model_names_fit_function_names_and_stay_apart() {
        assert_eq!(ToolName::new("inbox", "search").model_name(), "inbox__search");
        let dotted = ToolName::new("inbox", "mail.search").model_name();
        let underscored = ToolName::new("inbox", "mail_search").model_name();
        assert_ne!(dotted, underscored, "'.' and '_' do not collide");
        let long = ToolName::new("a-server-with-a-long-name", "x".repeat(60)).model_name();
        assert!(long.len() <= 64, "{long}");
        for name in [dotted, long] {
            assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'), "{name}");
        }
    }

    #[test]
    fn patterns_parse_and_match() {
        let every = ToolPattern::parse("inbox/*").expect("valid");
        let prefix = ToolPattern::parse("inbox/get_*").expect("valid");
        let one = ToolPattern::parse("inbox/search").expect("valid");
        let search = ToolName::parse("inbox/search").expect("valid");
        assert!(every.matches(&search) && one.matches(&search) && !prefix.matches(&search));
        assert!(prefix.matches(&ToolName::new("inbox", "get_mail")));
        assert!(!every.matches(&ToolName::new("calendar", "search")));
        for bad in ["inbox", "/x", "Inbox/x", "inbox/", "inbox/a b", "inbox/*x"] {
            assert!(ToolPattern::parse(bad).is_err(), "{bad}");
        }
        assert!(one.is_within(std::slice::from_ref(&every)) && prefix.is_within(std::slice::from_ref(&every)));
        assert!(!every.is_within(&[prefix]) && !every.is_within(&[one]));
    }

    #[test]
    fn a_run_gets_read_only_tools_of_both_lists_and_opted_in_writers() {
        let available = [
            tool("inbox/search", true),
            tool("inbox/archive", false),
            tool("inbox/send", false),
            tool("shell/run", false),
            tool("calendar/list", true),
        ];
        let agent = patterns(&["inbox/*", "calendar/*"]);
        let none = |_: &str| None;
        let run = tools_for_run(&agent, &JobTools::default(), &available, none);
        assert_eq!(names(&run), ["inbox/search", "calendar/list"], "only read-only by default");
        let job = JobTools {
            allow: Some(patterns(&["inbox/*"])),
            write: patterns(&["inbox/archive"]),
            ..JobTools::default()
        };
        let run = tools_for_run(&agent, &job, &available, none);
        assert_eq!(names(&run), ["inbox/search", "inbox/archive"]);
        let beyond = JobTools { write: patterns(&["shell/run"]), ..JobTools::default() };
        assert!(!names(&tools_for_run(&agent, &beyond, &available, none)).contains(&"shell/run".to_owned()));
        assert_eq!(beyond.beyond(&agent), ["shell/run"]);
    }

    #[test]
    fn a_missing_required_tool_is_named_with_why() {
        let available = [tool("inbox/search", true), tool("inbox/send", false)];
        let agent = patterns(&["inbox/*", "calendar/*"]);
        let job = JobTools {
            required: vec![
                ToolName::parse("inbox/search").expect("valid"),
                ToolName::parse("inbox/send").expect("valid"),
                ToolName::parse("calendar/list").expect("valid"),
            ],
            ..JobTools::default()
        };
        let run =
            tools_for_run(&agent, &job, &available, |server| (server == "calendar").then(|| "crashed".to_owned()));
        let texts: Vec<String> = run.missing.iter().map(ToString::to_string).collect();
        assert_eq!(texts.len(), 2, "{texts:?}");
        assert!(texts[0].contains("inbox/send") && texts[0].contains("write_tools"), "{}", texts[0]);
        assert!(texts[1].contains("calendar/list") && texts[1].contains("crashed"), "{}", texts[1]);
    }

    #[test]
    fn a_check_is_needed_within_both_lists_and_kept_in_the_stored_form() {
        let agent = patterns(&["inbox/*"]);
        let check = |tool: &str| ToolCheck::from_fields(tool, Some(serde_json::json!({"folder": "INBOX"}))).ok();
        let job = JobTools::default().with_check(check("inbox/unread"), &agent).expect("within");
        let run = tools_for_run(&agent, &job, &[tool("inbox/search", true)], |_| None);
        let texts: Vec<String> = run.missing.iter().map(ToString::to_string).collect();
        assert_eq!(texts, ["required tool inbox/unread is unavailable: server inbox does not list a tool \"unread\""]);
        let run = tools_for_run(&agent, &job, &[tool("inbox/unread", true)], |_| None);
        assert!(run.missing.is_empty() && names(&run) == ["inbox/unread"]);
        let (field, problem) = JobTools::default().with_check(check("calendar/list"), &agent).expect_err("beyond");
        assert_eq!(field, "check_tool");
        assert!(problem.contains("agent's `tools` list (inbox/*)"), "{problem}");
        let narrowed = JobTools { allow: Some(patterns(&["inbox/search"])), ..JobTools::default() };
        let (_, problem) = narrowed.with_check(check("inbox/unread"), &agent).expect_err("outside the job's");
        assert!(problem.contains("job's `tools` list"), "{problem}");
        let json = job.to_json().expect("stored");
        assert_eq!(JobTools::from_json(&json).expect("read back"), job);
        assert!(job.canonical().ends_with(r#";check=inbox/unread {"folder":"INBOX"}"#), "{}", job.canonical());
        let plain = JobTools { required: vec![ToolName::new("inbox", "search")], ..JobTools::default() };
        assert!(!plain.to_json().expect("stored").contains("check"), "old rows keep their form");
    }

    #[test]
    fn a_definition_holds_no_tools_for_a_job_without_any_and_reads_them_as_given() {
        let none = SharedJobTools::from(JobTools::default());
        assert_eq!(none, SharedJobTools::default(), "the default stores nothing");
        assert!(none.is_default() && none.allow.is_none() && none.required.is_empty());
        let given = JobTools { write: patterns(&["inbox/archive"]), ..JobTools::default() };
        let shared = SharedJobTools::from(given.clone());
        assert_eq!(*shared, given);
        assert_ne!(shared, none);
        assert_eq!(format!("{shared:?}"), format!("{given:?}"), "it prints as the tools themselves");
        assert!(std::mem::size_of::<SharedJobTools>() < std::mem::size_of::<JobTools>());
    }
}
