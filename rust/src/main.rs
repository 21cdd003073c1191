fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    match workbook_launch::cli::main_with(&argv) {
        Ok(text) => println!("{text}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(workbook_launch::cli::exit_code(&e));
        }
    }
}
