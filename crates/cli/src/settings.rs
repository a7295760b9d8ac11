//! Where `serve`'s settings come from besides its flags: a `LEASEHOLD_*`
//! environment variable for every flag (`--max-lease` is
//! `LEASEHOLD_MAX_LEASE`), and a TOML file (`--config FILE`, or
//! `LEASEHOLD_CONFIG`) whose keys are the flags' names. A flag wins over
//! the environment, which wins over the file, which wins over the default:
//! the file's values become the flags' defaults before the command line is
//! read, so that clap's own order (flag, then environment, then default)
//! gives that precedence.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::Command;

/// The environment variable of the flag `--long`.
fn env_name(long: &str) -> String {
    format!("LEASEHOLD_{}", long.replace('-', "_").to_ascii_uppercase())
}

/// The `--config` file `args` (or `LEASEHOLD_CONFIG`) name, if any.
fn config_path(args: &[OsString]) -> Option<PathBuf> {
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let arg = arg.to_string_lossy();
        if arg == "--" {
            break;
        }
        if arg == "--config" {
            return args.next().map(PathBuf::from);
        }
        if let Some(path) = arg.strip_prefix("--config=") {
            return Some(PathBuf::from(path));
        }
    }
    std::env::var_os("LEASEHOLD_CONFIG").map(PathBuf::from)
}

/// A TOML value as the command line would give it: items, each a string.
fn as_args(key: &str, value: &toml::Value) -> Result<Vec<String>, String> {
    Ok(match value {
        toml::Value::String(s) => vec![s.clone()],
        toml::Value::Integer(n) => vec![n.to_string()],
        toml::Value::Float(f) => vec![f.to_string()],
        toml::Value::Boolean(b) => vec![b.to_string()],
        toml::Value::Array(items) => items
            .iter()
            .map(|item| match item {
                toml::Value::Table(_) | toml::Value::Array(_) => {
                    Err(format!("{key}: a list of plain values is expected"))
                }
                item => as_args(key, item).map(|mut v| v.remove(0)),
            })
            .collect::<Result<_, _>>()?,
        toml::Value::Datetime(d) => vec![d.to_string()],
        toml::Value::Table(_) => return Err(format!("{key}: a table is not a flag's value")),
    })
}

/// `serve` with an environment variable for every flag and the file's
/// values as defaults; `cli` unchanged for every other command.
pub fn apply(cli: Command, args: &[OsString]) -> Result<Command, String> {
    let is_serve = args
        .iter()
        .skip(1)
        .find(|a| !a.to_string_lossy().starts_with('-'))
        .is_some_and(|a| a == "serve");
    let file = match config_path(args) {
        Some(path) if is_serve => Some((read(&path)?, path)),
        _ => None,
    };
    Ok(cli.mut_subcommand("serve", |serve| {
        let mut serve = serve.mut_args(|arg| match arg.get_long() {
            Some(long) if arg.get_env().is_none() && long != "help" => {
                let name = env_name(long);
                arg.env(name)
            }
            _ => arg,
        });
        if let Some((table, _)) = &file {
            for (key, value) in table {
                let long = key.replace('_', "-");
                let values = as_args(key, value).unwrap_or_default();
                // A flag the file gives is no longer required.
                serve = serve.mut_arg(&*long.replace('-', "_"), |arg| {
                    arg.default_values(values.clone()).required(false)
                });
            }
        }
        serve
    }))
}

/// The keys of `file`'s table that are no flag of `serve`, if any.
pub fn unknown_keys(cli: &Command, args: &[OsString]) -> Result<(), String> {
    let Some(path) = config_path(args) else {
        return Ok(());
    };
    let Some(serve) = cli.find_subcommand("serve") else {
        return Ok(());
    };
    let table = read(&path)?;
    for (key, value) in &table {
        let long = key.replace('_', "-");
        let known = serve
            .get_arguments()
            .any(|a| a.get_long() == Some(long.as_str()) && long != "config" && long != "help");
        if !known {
            return Err(format!(
                "{}: unknown key `{key}` (the keys are serve's flags, such as max-lease)",
                path.display()
            ));
        }
        as_args(key, value).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

fn read(path: &Path) -> Result<toml::Table, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("--config {}: {e}", path.display()))?;
    text.parse::<toml::Table>()
        .map_err(|e| format!("--config {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_flag_has_its_variable() {
        assert_eq!(env_name("max-lease"), "LEASEHOLD_MAX_LEASE");
        assert_eq!(env_name("tls-ca"), "LEASEHOLD_TLS_CA");
    }

    #[test]
    fn toml_values_read_as_the_command_line_would_give_them() {
        let table: toml::Table = "a = 3\nb = \"x\"\nc = [\"1=h:1\", \"2=h:2\"]\nd = true\n"
            .parse()
            .unwrap();
        assert_eq!(as_args("a", &table["a"]).unwrap(), vec!["3"]);
        assert_eq!(as_args("b", &table["b"]).unwrap(), vec!["x"]);
        assert_eq!(as_args("c", &table["c"]).unwrap(), vec!["1=h:1", "2=h:2"]);
        assert_eq!(as_args("d", &table["d"]).unwrap(), vec!["true"]);
        let nested: toml::Table = "t = { x = 1 }".parse().unwrap();
        assert!(as_args("t", &nested["t"]).is_err());
    }
}
