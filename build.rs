// `sqlx::migrate!` embeds the migrations folders at compile time; a new
// migration file must rebuild the binary (the approach sqlx documents).
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
