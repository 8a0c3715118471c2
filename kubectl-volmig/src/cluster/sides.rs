//! The two sides of an operation: the source's cluster and the
//! destination's, which are one cluster unless it migrates into another
//! (`--to-context`).

use std::path::Path;

use kube::Client;

use super::{connect_to, ClusterError};
use crate::spec::MigrationSpec;

/// Which side of an operation an object lives on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The source claim, its senders, their key Secret and source copies.
    Source,
    /// The destination claim, the receivers, the Service and the record.
    Destination,
}

/// A client for each side.
#[derive(Clone)]
pub struct Sides {
    pub source: Client,
    pub destination: Client,
    remote: bool,
}

impl Sides {
    /// One cluster holds both sides.
    pub fn one(client: Client) -> Sides {
        Sides {
            source: client.clone(),
            destination: client,
            remote: false,
        }
    }

    /// The destination is another cluster.
    pub fn two(source: Client, destination: Client) -> Sides {
        Sides {
            source,
            destination,
            remote: true,
        }
    }

    /// The clients of an operation of `spec` whose record `here` reads:
    /// `here` twice, or across clusters the source's too, reached by the
    /// context the record names ([`connect_to`], `kubeconfig` being the
    /// file this client was given).
    pub async fn of_record(
        here: &Client,
        kubeconfig: Option<&Path>,
        spec: &MigrationSpec,
    ) -> Result<Sides, ClusterError> {
        let Some(clusters) = &spec.clusters else {
            return Ok(Sides::one(here.clone()));
        };
        let there = connect_to(&clusters.source, kubeconfig, &spec.source.namespace).await?;
        Ok(Sides::two(there.client, here.clone()))
    }

    /// Whether the destination is another cluster.
    pub fn is_remote(&self) -> bool {
        self.remote
    }

    pub fn client(&self, side: Side) -> &Client {
        match side {
            Side::Source => &self.source,
            Side::Destination => &self.destination,
        }
    }

    /// Each cluster once, with the operation's namespaces in it: one
    /// cluster's client with both namespaces, or each side's with its own.
    pub fn scopes<'a>(
        &'a self,
        source_ns: &'a str,
        destination_ns: &'a str,
    ) -> Vec<(&'a Client, Vec<&'a str>)> {
        match self.remote {
            false => vec![(&self.destination, vec![destination_ns, source_ns])],
            true => vec![
                (&self.destination, vec![destination_ns]),
                (&self.source, vec![source_ns]),
            ],
        }
    }
}
