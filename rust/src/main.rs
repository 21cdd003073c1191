fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    match workbook_launch::cli::main_with(&argv) {
        Ok(text) => println!("{text}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(match e {
                workbook_launch::Error::Argument(_) | workbook_launch::Error::Io(_) => 2,
                workbook_launch::Error::Manifest(_) => 3,
                workbook_launch::Error::Library(_) => 4,
                workbook_launch::Error::Driver { .. } => 5,
            });
        }
    }
}
