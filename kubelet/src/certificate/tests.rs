//! Tests of the certificate module's pure parts.
