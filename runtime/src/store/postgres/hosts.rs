//! The hosts one PostgreSQL URL names: libpq's multi-host form
//! (`postgres://user@h1:5432,h2:5433/db?target_session_attrs=read-write`), read into one set
//! of connect options per host.
//!
//! sqlx reads a URL with one host; this splits the host list off the URL and gives each host
//! the rest of it (user, password, database, parameters), in the order the URL lists them.
//! `target_session_attrs` is libpq's, not sqlx's: the runtime always works on the host that
//! accepts writes, so it may say `read-write` (or `primary`) and nothing else.

use sqlx::postgres::PgConnectOptions;

use crate::error::{Error, Result};

/// The parameter libpq reads to choose among the hosts.
const SESSION_ATTRIBUTES: &str = "target_session_attrs";

/// One host of the database, and how to connect to it.
#[derive(Debug, Clone)]
pub(crate) struct Host {
    /// `host:port` (or the socket's path), as errors name it: never with the password.
    pub(crate) name: String,
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) options: PgConnectOptions,
}

/// The hosts `url` names, in its order.
///
/// # Errors
///
/// [`Error::Config`] for a URL whose host list or `target_session_attrs` cannot be used,
/// and sqlx's error for anything else in it sqlx refuses.
pub(crate) fn hosts(url: &str) -> Result<Vec<Host>> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| Error::Config("a PostgreSQL URL starts with postgres://".to_owned()))?;
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let (user, host_list) = match authority.rsplit_once('@') {
        Some((user, hosts)) => (Some(user), hosts),
        None => (None, authority),
    };
    let path = without_session_attributes(path)?;
    let mut hosts = Vec::new();
    for host in host_list.split(',') {
        if host.is_empty() && host_list.contains(',') {
            return Err(Error::Config(
                "the PostgreSQL URL's host list has an empty entry; list hosts as \
                 host1:port1,host2:port2"
                    .to_owned(),
            ));
        }
        let one = match user {
            Some(user) => format!("{scheme}://{user}@{host}{path}"),
            None => format!("{scheme}://{host}{path}"),
        };
        let options: PgConnectOptions = one.parse()?;
        let (host, port) = match options.get_socket() {
            Some(socket) => (socket.display().to_string(), options.get_port()),
            None => (options.get_host().to_owned(), options.get_port()),
        };
        hosts.push(Host {
            name: format!("{host}:{port}"),
            host,
            port,
            options,
        });
    }
    Ok(hosts)
}

/// The URL's path and parameters without `target_session_attrs`, once it says the session
/// must accept writes.
fn without_session_attributes(path: &str) -> Result<String> {
    let Some((before, query)) = path.split_once('?') else {
        return Ok(path.to_owned());
    };
    let mut kept = Vec::new();
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some((SESSION_ATTRIBUTES, "read-write" | "primary")) => {}
            Some((SESSION_ATTRIBUTES, other)) => {
                return Err(Error::Config(format!(
                    "target_session_attrs={other} is not supported: the runtime writes, so it \
                     works only on the host that accepts writes; give \
                     target_session_attrs=read-write or leave it out"
                )))
            }
            _ => kept.push(pair),
        }
    }
    Ok(match kept.is_empty() {
        true => before.to_owned(),
        false => format!("{before}?{}", kept.join("&")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_host_is_read_as_sqlx_reads_it() {
        let hosts = hosts("postgres://solid:secret@db.example:6432/shows?sslmode=disable").unwrap();
        assert_eq!(hosts.len(), 1);
        assert_eq!(hosts[0].name, "db.example:6432");
        assert_eq!(hosts[0].options.get_database(), Some("shows"));
        assert_eq!(hosts[0].options.get_username(), "solid");
    }

    #[test]
    fn each_host_of_a_list_gets_the_rest_of_the_url() {
        let url = "postgresql://solid@10.0.0.1:5432,10.0.0.2,[::1]:5434/shows\
                   ?target_session_attrs=read-write&application_name=app";
        let hosts = hosts(url).unwrap();
        let names: Vec<_> = hosts.iter().map(|host| host.name.as_str()).collect();
        assert_eq!(names, ["10.0.0.1:5432", "10.0.0.2:5432", "[::1]:5434"]);
        for host in &hosts {
            assert_eq!(host.options.get_database(), Some("shows"));
            assert_eq!(host.options.get_username(), "solid");
            assert_eq!(host.options.get_application_name(), Some("app"));
        }
    }

    #[test]
    fn a_session_that_need_not_accept_writes_is_refused() {
        for attributes in ["any", "read-only", "standby", "prefer-standby"] {
            let url = format!("postgres://a:5432,b:5432/db?target_session_attrs={attributes}");
            assert!(
                matches!(hosts(&url), Err(Error::Config(message)) if message.contains(attributes)),
                "{attributes}"
            );
        }
        assert!(hosts("postgres://a:5432,b:5432/db?target_session_attrs=primary").is_ok());
    }

    #[test]
    fn an_empty_entry_in_the_host_list_is_refused() {
        assert!(matches!(
            hosts("postgres://a:5432,,b:5432/db"),
            Err(Error::Config(_))
        ));
    }

    #[test]
    fn errors_never_name_the_password() {
        let refused = hosts("postgres://solid:hunter2@a:notaport,b/db").unwrap_err();
        assert!(!refused.to_string().contains("hunter2"), "{refused}");
    }
}
