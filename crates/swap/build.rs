fn main() {
    let map = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("swap.map");
    println!("cargo:rerun-if-changed=swap.map");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map.display()
    );
}
