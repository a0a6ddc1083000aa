fn main() {
    let rt = madsim::runtime::Runtime::with_seed_and_config(1, madsim::Config::default());
    rt.block_on(async { println!("hello from madsim"); });
}
