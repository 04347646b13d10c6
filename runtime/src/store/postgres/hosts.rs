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
pub(crate) type Host = crate::store::failover::Host<sqlx::Postgres>;

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
    let Parameters {
        path,
        hosts: listed,
        ports,
    } = parameters(path)?;
    let entries = match listed {
        None => host_list.split(',').map(str::to_owned).collect(),
        Some(_) if !host_list.is_empty() => {
            return Err(Error::Config(
                "the PostgreSQL URL names hosts both before its path and in a host parameter; \
                 name them in one place"
                    .to_owned(),
            ))
        }
        Some(listed) => with_ports(&listed, ports.as_deref())?,
    };
    let host_list = entries.join(",");
    let mut hosts = Vec::new();
    for host in entries.iter().map(String::as_str) {
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

/// A URL's path and parameters, without those this file reads: `target_session_attrs`
/// (once it says the session must accept writes), and libpq's `host` and `port` lists.
struct Parameters {
    path: String,
    hosts: Option<Vec<String>>,
    ports: Option<Vec<String>>,
}

/// The [`Parameters`] of the URL's `path` (from its `/`).
fn parameters(path: &str) -> Result<Parameters> {
    let Some((before, query)) = path.split_once('?') else {
        return Ok(Parameters {
            path: path.to_owned(),
            hosts: None,
            ports: None,
        });
    };
    let (mut hosts, mut ports) = (None, None);
    let list = |value: &str| value.split(',').map(str::to_owned).collect::<Vec<_>>();
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
            Some(("host", value)) => hosts = Some(list(value)),
            Some(("port", value)) => ports = Some(list(value)),
            _ => kept.push(pair),
        }
    }
    let path = match kept.is_empty() {
        true => before.to_owned(),
        false => format!("{before}?{}", kept.join("&")),
    };
    Ok(Parameters { path, hosts, ports })
}

/// `host:port` for each host of a `host` parameter, with the `port` parameter's ports (one
/// for all, or one each; none: the default).
fn with_ports(hosts: &[String], ports: Option<&[String]>) -> Result<Vec<String>> {
    let port = |index: usize| match ports {
        None => Ok(None),
        Some([one]) => Ok(Some(one.as_str())),
        Some(ports) if ports.len() == hosts.len() => Ok(Some(ports[index].as_str())),
        Some(_) => Err(Error::Config(
            "the PostgreSQL URL's port parameter lists a different number of ports than its \
             host parameter lists hosts; give one port, or one per host"
                .to_owned(),
        )),
    };
    hosts
        .iter()
        .enumerate()
        .map(|(index, host)| {
            Ok(match port(index)? {
                Some(port) => format!("{host}:{port}"),
                None => host.clone(),
            })
        })
        .collect()
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
    fn hosts_may_be_listed_as_libpqs_host_and_port_parameters() {
        let url = "postgres:///shows?host=a,b&port=5432,5433&user=solid&sslmode=disable";
        let listed = hosts(url).unwrap();
        let names: Vec<_> = listed.iter().map(|host| host.name.as_str()).collect();
        assert_eq!(names, ["a:5432", "b:5433"]);
        assert_eq!(listed[1].options.get_username(), "solid");
        let one_port = hosts("postgres:///shows?host=a,b&port=6000").unwrap();
        assert_eq!(one_port[1].name, "b:6000");
        assert!(matches!(
            hosts("postgres:///shows?host=a,b,c&port=1,2"),
            Err(Error::Config(_))
        ));
        assert!(matches!(
            hosts("postgres://x:5432/shows?host=a,b"),
            Err(Error::Config(_))
        ));
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
