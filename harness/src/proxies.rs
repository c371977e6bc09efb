//! What `harness exec` tells its command about the embedded fault server's TCP proxies: one
//! `HARNESS_PROXY_<NAME>_ADDR=host:port` per enabled proxy, so a service started under it talks
//! to its database or cache through the proxy a scenario's toxics degrade.

use fault_server::FaultServer;

/// The environment variable for proxy `name`: its name in upper case, every character that is
/// not a letter or a digit made `_` (`redis-main` → `HARNESS_PROXY_REDIS_MAIN_ADDR`).
pub fn env_name(name: &str) -> String {
    let name: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("HARNESS_PROXY_{name}_ADDR")
}

/// The variables for `server`'s enabled proxies: name and `host:port`.
pub fn env(server: &FaultServer) -> Vec<(String, String)> {
    server
        .proxies()
        .addresses()
        .into_iter()
        .filter_map(|(name, addr)| Some((env_name(&name), addr?.to_string())))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_become_variables() {
        assert_eq!(super::env_name("redis"), "HARNESS_PROXY_REDIS_ADDR");
        assert_eq!(super::env_name("pg.main-1"), "HARNESS_PROXY_PG_MAIN_1_ADDR");
    }
}
