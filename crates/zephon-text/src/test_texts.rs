//! Texts for the pre-tokenizer tests: every sequence of up to three atoms (the characters and
//! runs the split regexes treat specially), then `random` longer ones, sorted and deduplicated.

pub(crate) fn atom_texts(atoms: &[&str], seed: u64, random: usize) -> Vec<String> {
    let mut texts: Vec<String> = vec![String::new()];
    for _ in 0..3 {
        let longer: Vec<String> = texts.iter().flat_map(|t| atoms.iter().map(move |a| format!("{t}{a}"))).collect();
        texts.extend(longer);
    }
    let mut seed = seed;
    for _ in 0..random {
        let mut text = String::new();
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        for k in 0..4 + (seed >> 60) {
            text.push_str(atoms[(seed.rotate_left(11 * k as u32) >> 40) as usize % atoms.len()]);
        }
        texts.push(text);
    }
    texts.sort();
    texts.dedup();
    texts
}
