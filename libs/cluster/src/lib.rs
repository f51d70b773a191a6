//! Running Orbit's services as many processes on one database.
