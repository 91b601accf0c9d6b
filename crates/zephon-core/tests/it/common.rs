pub use zephon_testkit::*;
