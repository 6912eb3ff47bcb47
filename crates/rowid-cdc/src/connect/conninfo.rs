//! Connection strings as libpq reads them: `key=value` pairs (values optionally single-quoted,
//! with `\'` and `\\`) or a `postgresql://` URI, the same keywords, the same environment
//! fallbacks (`PGHOST`, `PGPORT`, `PGDATABASE`, `PGUSER`, `PGPASSWORD`, `PGPASSFILE`,
//! `PGSSLMODE`, `PGSSLROOTCERT`), and the password file (`~/.pgpass` or `passfile=`, ignored
//! unless only its owner can read it, as libpq does). One [`Conninfo`] serves every connection
//! the command makes: the replication connection, the SQL connection and a PostgreSQL sink.
//!
//! A password, wherever it came from, is only ever handed to the connection: never printed,
//! logged, written to the state file or put on another program's command line. Passing one
//! in `--dsn` works, but it is visible to other users of the machine (`ps`): [`Conninfo`]
//! says so ([`Conninfo::password_on_command_line`]), and the command warns.

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The socket directory used when no host is given (Debian's libpq default).
pub const DEFAULT_SOCKET_DIR: &str = "/var/run/postgresql";

/// Where the server is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Host {
    /// A TCP host name or address.
    Tcp(String),
    /// A unix socket directory.
    Unix(PathBuf),
}

/// libpq's `sslmode` (`allow` is not supported: nothing here would choose plain first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    /// Never TLS.
    Disable,
    /// TLS when the server offers it, else plain.
    Prefer,
    /// TLS, the certificate not verified (unless a root certificate is given: then as
    /// `VerifyCa`, as libpq does).
    Require,
    /// TLS, the certificate chain verified against the root certificate.
    VerifyCa,
    /// TLS, chain and host name verified.
    VerifyFull,
}

impl SslMode {
    fn parse(s: &str) -> Result<SslMode, BadConninfo> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            "allow" => {
                return Err(BadConninfo(
                    "sslmode=allow is not supported (use prefer, require, verify-ca or \
                     verify-full)"
                        .into(),
                ));
            }
            other => {
                return Err(BadConninfo(format!(
                    "invalid sslmode value {other:?} (disable, prefer, require, verify-ca, \
                     verify-full)"
                )));
            }
        })
    }

    /// The name libpq uses.
    pub fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// Where the root certificates come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RootCert {
    /// A PEM file.
    File(PathBuf),
    /// The Mozilla roots (`sslrootcert=system`).
    System,
}

/// A password, never shown.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    /// The password itself, for a connection.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(..)")
    }
}

/// Where a password came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PasswordSource {
    /// The connection string (so the command line, unless it came from the environment).
    Conninfo,
    /// `PGPASSWORD`.
    Environment,
    /// The password file.
    Passfile,
}

/// A parsed connection string, with libpq's defaults and fallbacks applied.
#[derive(Clone, PartialEq, Eq)]
pub struct Conninfo {
    /// The server.
    pub host: Host,
    /// `hostaddr`: the address to connect to while `host` names the server (TLS verifies it).
    pub hostaddr: Option<IpAddr>,
    /// The port.
    pub port: u16,
    /// The database.
    pub dbname: String,
    /// The role.
    pub user: String,
    /// The password, if any (see [`Conninfo::password_source`]).
    pub password: Option<Password>,
    password_source: Option<PasswordSource>,
    /// `sslmode` (default `prefer`, libpq's).
    pub sslmode: SslMode,
    /// `sslrootcert`.
    pub sslrootcert: Option<RootCert>,
    /// `connect_timeout`.
    pub connect_timeout: Option<Duration>,
    /// `options` (`-c name=value ...`).
    pub options: Option<String>,
}

impl fmt::Debug for Conninfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Conninfo({})", self.describe())
    }
}

/// The connection string could not be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadConninfo(pub String);

impl fmt::Display for BadConninfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadConninfo {}

/// What the process environment holds of libpq's variables (a seam for tests).
#[derive(Clone, Debug, Default)]
pub struct Environment {
    vars: Vec<(String, String)>,
    home: Option<PathBuf>,
}

impl Environment {
    /// The process's own environment.
    pub fn current() -> Environment {
        Environment {
            vars: std::env::vars()
                .filter(|(k, _)| k.starts_with("PG"))
                .collect(),
            home: std::env::var_os("HOME").map(PathBuf::from),
        }
    }

    /// An environment with exactly these variables and home directory.
    pub fn with(vars: &[(&str, &str)], home: Option<&Path>) -> Environment {
        Environment {
            vars: vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            home: home.map(Path::to_path_buf),
        }
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.vars
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }
}

/// The keywords this reader knows (libpq's names).
const KEYWORDS: [&str; 11] = [
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "passfile",
    "sslmode",
    "sslrootcert",
    "connect_timeout",
    "options",
];

/// libpq keywords that are refused rather than ignored: they would change security.
const UNSUPPORTED: [&str; 5] = [
    "sslcert",
    "sslkey",
    "sslpassword",
    "gssencmode",
    "require_auth",
];

fn bad(message: impl Into<String>) -> BadConninfo {
    BadConninfo(message.into())
}

impl Conninfo {
    /// Parses `s` with the process's environment.
    pub fn parse(s: &str) -> Result<Conninfo, BadConninfo> {
        Conninfo::parse_with(s, &Environment::current())
    }

    /// Parses `s` with `env` standing for the environment.
    pub fn parse_with(s: &str, env: &Environment) -> Result<Conninfo, BadConninfo> {
        let pairs = if s.starts_with("postgresql://") || s.starts_with("postgres://") {
            parse_uri(s)?
        } else {
            parse_pairs(s)?
        };
        let mut given: Vec<(String, String)> = Vec::new();
        for (k, v) in pairs {
            if UNSUPPORTED.contains(&k.as_str()) {
                return Err(bad(format!("connection option {k} is not supported")));
            }
            if !KEYWORDS.contains(&k.as_str()) {
                return Err(bad(format!("invalid connection option {k:?}")));
            }
            given.retain(|(g, _)| *g != k);
            given.push((k, v));
        }
        let value = |key: &str, var: &str| -> Option<String> {
            given
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
                .filter(|v| !v.is_empty())
                .or_else(|| env.get(var).map(str::to_string))
        };
        let host = match value("host", "PGHOST") {
            None => Host::Unix(PathBuf::from(DEFAULT_SOCKET_DIR)),
            Some(h) if h.contains(',') => return Err(bad("give one host")),
            Some(h) if h.starts_with('/') => Host::Unix(PathBuf::from(h)),
            Some(h) => Host::Tcp(h),
        };
        let hostaddr = match value("hostaddr", "PGHOSTADDR") {
            None => None,
            Some(a) => Some(
                a.parse::<IpAddr>()
                    .map_err(|_| bad(format!("invalid hostaddr {a:?}")))?,
            ),
        };
        let port = match value("port", "PGPORT") {
            None => 5432,
            Some(p) => p
                .parse::<u16>()
                .map_err(|_| bad(format!("invalid port {p:?} (give one port)")))?,
        };
        let user = value("user", "PGUSER").ok_or_else(|| bad("user= is missing"))?;
        let dbname = value("dbname", "PGDATABASE").unwrap_or_else(|| user.clone());
        let sslmode = match value("sslmode", "PGSSLMODE") {
            None => SslMode::Prefer,
            Some(m) => SslMode::parse(&m)?,
        };
        let sslrootcert = match value("sslrootcert", "PGSSLROOTCERT") {
            Some(s) if s == "system" => Some(RootCert::System),
            Some(s) => Some(RootCert::File(PathBuf::from(s))),
            // libpq's default root certificate, when it exists.
            None => env
                .home
                .as_ref()
                .map(|h| h.join(".postgresql").join("root.crt"))
                .filter(|p| p.is_file())
                .map(RootCert::File),
        };
        let connect_timeout = match value("connect_timeout", "PGCONNECT_TIMEOUT") {
            None => None,
            Some(t) => match t.parse::<i64>() {
                Ok(n) if n > 0 => Some(Duration::from_secs(n.max(2) as u64)),
                Ok(_) => None,
                Err(_) => return Err(bad(format!("invalid connect_timeout {t:?}"))),
            },
        };
        let options = value("options", "PGOPTIONS");
        let mut info = Conninfo {
            host,
            hostaddr,
            port,
            dbname,
            user,
            password: None,
            password_source: None,
            sslmode,
            sslrootcert,
            connect_timeout,
            options,
        };
        if let Some(p) = given.iter().find(|(k, _)| k == "password").map(|(_, v)| v) {
            info.password = Some(Password(p.clone()));
            info.password_source = Some(PasswordSource::Conninfo);
        } else if let Some(p) = env.get("PGPASSWORD") {
            info.password = Some(Password(p.to_string()));
            info.password_source = Some(PasswordSource::Environment);
        } else {
            let passfile = given
                .iter()
                .find(|(k, _)| k == "passfile")
                .map(|(_, v)| PathBuf::from(v))
                .or_else(|| env.get("PGPASSFILE").map(PathBuf::from))
                .or_else(|| env.home.as_ref().map(|h| h.join(".pgpass")));
            if let Some(path) = passfile
                && let Some(p) = info.password_from_file(&path)
            {
                info.password = Some(Password(p));
                info.password_source = Some(PasswordSource::Passfile);
            }
        }
        Ok(info)
    }

    /// Where the password came from (`None`: there is none).
    pub fn password_source(&self) -> Option<PasswordSource> {
        self.password_source
    }

    /// The password was written in the connection string itself.
    pub fn password_on_command_line(&self) -> bool {
        self.password_source == Some(PasswordSource::Conninfo)
    }

    /// The host name a password file line and TLS verification match: `localhost` for the
    /// default socket directory, the directory for another socket, else the host.
    pub fn host_name(&self) -> String {
        match &self.host {
            Host::Unix(p) if p == Path::new(DEFAULT_SOCKET_DIR) => "localhost".into(),
            Host::Unix(p) => p.display().to_string(),
            Host::Tcp(h) => h.clone(),
        }
    }

    /// The password file's line for this connection, as libpq reads it: `host:port:db:user:
    /// password`, `*` matching anything, `\` escaping `:` and `\`, `#` starting a comment; a
    /// file that its group or others can read is ignored (with a warning on stderr, as libpq).
    fn password_from_file(&self, path: &Path) -> Option<String> {
        let meta = std::fs::metadata(path).ok()?;
        if !meta.is_file() {
            return None;
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            if meta.permissions().mode() & 0o077 != 0 {
                eprintln!(
                    "rowid-cdc: warning: password file {} has group or world access; \
                     permissions should be u=rw (0600) or less: it is not read",
                    path.display()
                );
                return None;
            }
        }
        let text = std::fs::read_to_string(path).ok()?;
        let (host, port) = (self.host_name(), self.port.to_string());
        text.lines()
            .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
            .find_map(|line| {
                let fields = split_passfile_line(line);
                if fields.len() < 5 {
                    return None;
                }
                let m = |field: &str, want: &str| field == "*" || field == want;
                (m(&fields[0], &host)
                    && m(&fields[1], &port)
                    && m(&fields[2], &self.dbname)
                    && m(&fields[3], &self.user))
                .then(|| fields[4..].join(":"))
            })
    }

    /// The address to connect a TCP socket to: `hostaddr` when given, else the host name.
    pub fn tcp_target(&self) -> Option<String> {
        match (&self.host, self.hostaddr) {
            (_, Some(addr)) => Some(addr.to_string()),
            (Host::Tcp(h), None) => Some(h.clone()),
            (Host::Unix(_), None) => None,
        }
    }

    /// `user@host:port/dbname`, for messages (never the password).
    pub fn describe(&self) -> String {
        let host = match &self.host {
            Host::Tcp(h) => h.clone(),
            Host::Unix(p) => p.display().to_string(),
        };
        format!("{}@{}:{}/{}", self.user, host, self.port, self.dbname)
    }

    /// The same server, user and TLS settings, database `dbname`.
    pub fn with_dbname(&self, dbname: &str) -> Conninfo {
        Conninfo {
            dbname: dbname.to_string(),
            ..self.clone()
        }
    }
}

impl std::str::FromStr for Conninfo {
    type Err = BadConninfo;

    fn from_str(s: &str) -> Result<Conninfo, BadConninfo> {
        Conninfo::parse(s)
    }
}

/// Splits a password file line at unescaped `:`, undoing `\:` and `\\`.
fn split_passfile_line(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let (Some(n), Some(f)) = (chars.next(), fields.last_mut()) {
                    f.push(n);
                }
            }
            ':' => fields.push(String::new()),
            c => {
                if let Some(f) = fields.last_mut() {
                    f.push(c);
                }
            }
        }
    }
    fields
}

/// `key=value key2='quoted \' value'` into pairs.
fn parse_pairs(s: &str) -> Result<Vec<(String, String)>, BadConninfo> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            return Ok(out);
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            chars.next();
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.next() != Some('=') {
            return Err(bad(format!(
                "missing \"=\" after {key:?} in the connection string"
            )));
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut value = String::new();
        if chars.peek() == Some(&'\'') {
            chars.next();
            loop {
                match chars.next() {
                    None => return Err(bad("unterminated quoted string in the connection string")),
                    Some('\'') => break,
                    Some('\\') => match chars.next() {
                        Some(c) => value.push(c),
                        None => return Err(bad("unterminated quoted string")),
                    },
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                chars.next();
                if c == '\\' {
                    if let Some(n) = chars.next() {
                        value.push(n);
                    }
                } else {
                    value.push(c);
                }
            }
        }
        out.push((key, value));
    }
}

/// `%xx` decoding.
fn percent_decode(s: &str) -> Result<String, BadConninfo> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| bad(format!("invalid percent-encoded token in {s:?}")))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad("a URI component is not UTF-8"))
}

/// `postgresql://[user[:password]@][host][:port][/dbname][?key=value&...]` into pairs.
fn parse_uri(s: &str) -> Result<Vec<(String, String)>, BadConninfo> {
    let rest = s
        .strip_prefix("postgresql://")
        .or_else(|| s.strip_prefix("postgres://"))
        .unwrap_or(s);
    let (main, query) = match rest.split_once('?') {
        Some((m, q)) => (m, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = match main.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (main, None),
    };
    let mut out = Vec::new();
    let hostport = match authority.rsplit_once('@') {
        Some((userinfo, hostport)) => {
            match userinfo.split_once(':') {
                Some((u, p)) => {
                    out.push(("user".to_string(), percent_decode(u)?));
                    out.push(("password".to_string(), percent_decode(p)?));
                }
                None if !userinfo.is_empty() => {
                    out.push(("user".to_string(), percent_decode(userinfo)?))
                }
                None => {}
            }
            hostport
        }
        None => authority,
    };
    if hostport.contains(',') {
        return Err(bad("give one host"));
    }
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (h, after) = v6
            .split_once(']')
            .ok_or_else(|| bad("unterminated [ in the URI's host"))?;
        (h.to_string(), after.strip_prefix(':').map(str::to_string))
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (percent_decode(h)?, Some(p.to_string())),
            None => (percent_decode(hostport)?, None),
        }
    };
    if !host.is_empty() {
        out.push(("host".to_string(), host));
    }
    if let Some(p) = port.filter(|p| !p.is_empty()) {
        out.push(("port".to_string(), p));
    }
    if let Some(db) = path.filter(|p| !p.is_empty()) {
        out.push(("dbname".to_string(), percent_decode(db)?));
    }
    for kv in query
        .unwrap_or_default()
        .split('&')
        .filter(|kv| !kv.is_empty())
    {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| bad(format!("missing \"=\" in URI parameter {kv:?}")))?;
        out.push((percent_decode(k)?, percent_decode(v)?));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none() -> Environment {
        Environment::with(&[], None)
    }

    #[test]
    fn pairs_and_uris_read_the_same() {
        let a = Conninfo::parse_with(
            "host=db.example port=6543 dbname=app user=cdc sslmode=verify-full \
             sslrootcert=/ca.pem",
            &none(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let b = Conninfo::parse_with(
            "postgresql://cdc@db.example:6543/app?sslmode=verify-full&sslrootcert=%2Fca.pem",
            &none(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(a, b);
        assert_eq!(a.sslmode, SslMode::VerifyFull);
        assert_eq!(a.sslrootcert, Some(RootCert::File("/ca.pem".into())));
        assert_eq!(a.describe(), "cdc@db.example:6543/app");
        let q = Conninfo::parse_with(r"user='o\'brien' host = /tmp dbname='a b'", &none())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((q.user.as_str(), q.dbname.as_str()), ("o'brien", "a b"));
        assert_eq!(q.host, Host::Unix("/tmp".into()));
        assert_eq!(q.host_name(), "/tmp");
        let d = Conninfo::parse_with("user=x", &none()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (d.host_name().as_str(), d.dbname.as_str()),
            ("localhost", "x")
        );
        assert_eq!(d.sslmode, SslMode::Prefer);
        let v6 = Conninfo::parse_with("postgres://u@[::1]:7/d", &none())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((v6.host, v6.port), (Host::Tcp("::1".into()), 7));
    }

    #[test]
    fn what_libpq_would_refuse_is_refused() {
        for (s, want) in [
            ("host=/tmp dbname=app", "user= is missing"),
            ("host=a,b user=x", "one host"),
            ("user=x sslmode=allow", "allow is not supported"),
            ("user=x sslmode=sometimes", "invalid sslmode"),
            ("user=x sslcert=/c.pem", "sslcert is not supported"),
            ("user=x frobnicate=1", "invalid connection option"),
            ("user=x port=99999", "invalid port"),
            ("user", "missing \"=\""),
            ("user='x", "unterminated"),
        ] {
            let e = Conninfo::parse_with(s, &none()).expect_err(s).to_string();
            assert!(e.contains(want), "{s}: {e}");
        }
    }

    #[test]
    fn passwords_never_show_and_say_where_they_came_from() {
        let c = Conninfo::parse_with("user=cdc password=s3cret host=/tmp", &none())
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(c.password_on_command_line());
        assert!(!format!("{c:?}").contains("s3cret"));
        assert!(!c.describe().contains("s3cret"));
        let env = Environment::with(&[("PGPASSWORD", "fromenv"), ("PGUSER", "u")], None);
        let c = Conninfo::parse_with("host=/tmp", &env).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.password_source(), Some(PasswordSource::Environment));
        assert_eq!(c.password.as_ref().map(Password::expose), Some("fromenv"));
        assert_eq!(c.user, "u");
    }

    #[test]
    fn the_password_file_is_read_as_libpq_reads_it() {
        let dir = std::env::temp_dir().join(format!("rowid-cdc-pgpass-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let file = dir.join(".pgpass");
        std::fs::write(
            &file,
            "# comment\n\
             otherhost:*:*:*:wrong\n\
             db.example:6543:app:cdc:pa\\:ss\\\\word\n\
             localhost:5432:*:cdc:local\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))
            .unwrap_or_else(|e| panic!("{e}"));
        let env = Environment::with(&[], Some(&dir));
        let c = Conninfo::parse_with("host=db.example port=6543 dbname=app user=cdc", &env)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.password_source(), Some(PasswordSource::Passfile));
        assert_eq!(
            c.password.as_ref().map(Password::expose),
            Some("pa:ss\\word")
        );
        // The default socket directory matches "localhost".
        let c = Conninfo::parse_with("user=cdc dbname=x", &env).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.password.as_ref().map(Password::expose), Some("local"));
        // No line matches: no password.
        let c = Conninfo::parse_with("host=/elsewhere user=cdc", &env)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.password, None);
        // A file others can read is ignored.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))
            .unwrap_or_else(|e| panic!("{e}"));
        let c = Conninfo::parse_with("host=db.example port=6543 dbname=app user=cdc", &env)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.password, None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
