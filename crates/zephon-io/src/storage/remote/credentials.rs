//! AWS profiles as the AWS SDKs read them (`object_store` reads the environment and instance
//! roles, not the files): `AWS_PROFILE` (else `default`) from `~/.aws/credentials` and
//! `~/.aws/config` (or `AWS_SHARED_CREDENTIALS_FILE`, `AWS_CONFIG_FILE`), with static keys or
//! a `credential_process`, whose credentials are asked for again before they expire.

use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use object_store::aws::{AwsCredential, AwsCredentialProvider};
use object_store::{CredentialProvider, StaticCredentialProvider};

/// What a profile gives.
pub(crate) struct Profile {
    pub(crate) region: Option<String>,
    pub(crate) endpoint: Option<String>,
    pub(crate) provider: AwsCredentialProvider,
}

/// `[section]` → key → value, of an INI file as the AWS files write them.
fn ini(text: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut out: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut section = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.trim().to_string();
        } else if let Some((k, v)) = line.split_once('=') {
            out.entry(section.clone()).or_default().insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    out
}

fn home_file(var: &str, name: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".aws").join(name)))
}

/// The profile to sign with, when the environment holds no keys and a profile file names it;
/// `None` to let the environment and instance roles decide.
pub(crate) fn aws_profile() -> io::Result<Option<Profile>> {
    if std::env::var_os("AWS_ACCESS_KEY_ID").is_some() {
        return Ok(None);
    }
    let named = std::env::var("AWS_PROFILE").ok();
    let name = named.clone().unwrap_or_else(|| "default".into());
    let read =
        |p: Option<PathBuf>| p.and_then(|p| std::fs::read_to_string(p).ok()).map(|t| ini(&t)).unwrap_or_default();
    let credentials = read(home_file("AWS_SHARED_CREDENTIALS_FILE", "credentials"));
    let config = read(home_file("AWS_CONFIG_FILE", "config"));
    let config_section = if name == "default" { "default".to_string() } else { format!("profile {name}") };
    let mut keys = config.get(&config_section).cloned().unwrap_or_default();
    keys.extend(credentials.get(&name).cloned().unwrap_or_default());
    if keys.is_empty() {
        return match named {
            Some(n) => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("AWS_PROFILE={n}: no such profile in ~/.aws/credentials or ~/.aws/config"),
            )),
            None => Ok(None),
        };
    }
    let provider: AwsCredentialProvider = if let Some(command) = keys.get("credential_process") {
        Arc::new(ProcessProvider { command: command.clone(), cached: Mutex::new(None) })
    } else if let (Some(id), Some(secret)) = (keys.get("aws_access_key_id"), keys.get("aws_secret_access_key")) {
        Arc::new(StaticCredentialProvider::new(AwsCredential {
            key_id: id.clone(),
            secret_key: secret.clone(),
            token: keys.get("aws_session_token").cloned(),
        }))
    } else if let Some(k) =
        ["role_arn", "sso_session", "sso_start_url", "web_identity_token_file"].iter().find(|k| keys.contains_key(**k))
    {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "AWS profile {name} uses `{k}`, which zephon does not read: give it a `credential_process` (e.g. \
                 `aws configure export-credentials --profile {name} --format process`) or set the AWS_* keys"
            ),
        ));
    } else {
        return Ok(None);
    };
    Ok(Some(Profile { region: keys.get("region").cloned(), endpoint: keys.get("endpoint_url").cloned(), provider }))
}

/// Credentials from a `credential_process`, run again when they come within a minute of their
/// `Expiration` (never, when they have none).
struct ProcessProvider {
    command: String,
    cached: Mutex<Option<(Arc<AwsCredential>, Option<SystemTime>)>>,
}

impl std::fmt::Debug for ProcessProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The command may carry arguments but not the secrets it prints.
        write!(f, "ProcessProvider({})", self.command)
    }
}

impl ProcessProvider {
    fn run(&self) -> Result<(AwsCredential, Option<SystemTime>), String> {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&self.command)
            .output()
            .map_err(|e| format!("credential_process could not run: {e}"))?;
        if !out.status.success() {
            return Err(format!("credential_process exited with {}", out.status));
        }
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).map_err(|e| format!("credential_process printed no JSON: {e}"))?;
        let field = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_string);
        let (Some(id), Some(secret)) = (field("AccessKeyId"), field("SecretAccessKey")) else {
            return Err("credential_process printed no AccessKeyId and SecretAccessKey".into());
        };
        let expires = field("Expiration").and_then(|e| parse_rfc3339(&e));
        Ok((AwsCredential { key_id: id, secret_key: secret, token: field("SessionToken") }, expires))
    }
}

/// `YYYY-MM-DDTHH:MM:SSZ` (fractions and offsets as `credential_process` outputs write them).
fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let (date, time) = s.split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let time = time.trim_end_matches('Z');
    let time = time.split(['+']).next()?;
    let mut t = time.split(':');
    let (h, min) = (t.next()?.parse::<i64>().ok()?, t.next()?.parse::<i64>().ok()?);
    let sec = t.next().and_then(|x| x.split('.').next()?.parse::<i64>().ok()).unwrap_or(0);
    // Days from the civil date (Howard Hinnant's algorithm).
    let (y, m) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + min * 60 + sec;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).ok()?))
}

#[async_trait::async_trait]
impl CredentialProvider for ProcessProvider {
    type Credential = AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<AwsCredential>> {
        let fresh = |expires: &Option<SystemTime>| {
            expires.is_none_or(|e| e.duration_since(SystemTime::now()).is_ok_and(|left| left > Duration::from_secs(60)))
        };
        let mut cached = self.cached.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((c, expires)) = cached.as_ref()
            && fresh(expires)
        {
            return Ok(c.clone());
        }
        let (c, expires) = self.run().map_err(|e| object_store::Error::Generic { store: "S3", source: e.into() })?;
        let c = Arc::new(c);
        *cached = Some((c.clone(), expires));
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ini_sections_and_expiry_times_are_read() {
        let f = ini("[default]\nregion = eu-west-1\n# c\n[profile dev]\ncredential_process = echo x\n");
        assert_eq!(f["default"]["region"], "eu-west-1");
        assert_eq!(f["profile dev"]["credential_process"], "echo x");
        let t = parse_rfc3339("2030-01-02T03:04:05Z").unwrap();
        assert_eq!(t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs(), 1_893_553_445);
        assert!(parse_rfc3339("2030-01-02T03:04:05.123+00:00").is_some());
        assert!(parse_rfc3339("tomorrow").is_none());
    }
}
