use std::collections::HashSet;

use super::*;

fn sources(spec: &[(usize, f64)]) -> Vec<Source> {
    spec.iter()
        .map(|&(len, weight)| Source { len, weight })
        .collect()
}

#[test]
fn each_source_gives_its_share_in_every_epoch() {
    // 0.7 / 0.3 of sources of 1 000 and 50 000 samples, over 20 epochs.
    let mixture = Mixture::new(&sources(&[(1_000, 0.7), (50_000, 0.3)]), Some(10_000)).unwrap();
    assert_eq!(mixture.counts(), &[7_000, 3_000]);
    let mut taken = [0usize; 2];
    for epoch in 0..20 {
        let order = mixture.order(7, epoch, true);
        assert_eq!(order.len(), 10_000);
        for id in order {
            taken[mixture.source_of(id).unwrap().0] += 1;
        }
    }
    let total = taken[0] + taken[1];
    assert!((taken[0] as f64 / total as f64 - 0.7).abs() < 0.01);
    assert!((taken[1] as f64 / total as f64 - 0.3).abs() < 0.01);
    // Shares that do not divide: the remainder goes to the largest fractions.
    let odd = Mixture::new(&sources(&[(10, 1.0), (10, 1.0), (10, 1.0)]), Some(10)).unwrap();
    assert_eq!(odd.counts(), &[4, 3, 3]);
    assert_eq!(odd.epoch_len(), 10);
}

#[test]
fn a_source_repeats_or_is_sampled_whole_pass_by_whole_pass() {
    // A small source (100) read 7 times an epoch, a large one (5 000) a tenth of it.
    let mixture = Mixture::new(&sources(&[(100, 0.7), (5_000, 0.3)]), Some(1_000)).unwrap();
    for s in 0..2 {
        let len = [100u64, 5_000][s];
        // The source's samples in delivery order, over 20 epochs: each pass (each `len`
        // in a row) is the whole source once, so no sample comes twice within one.
        let delivered: Vec<u64> = (0..20)
            .flat_map(|epoch| mixture.order(3, epoch, true))
            .filter_map(|id| mixture.source_of(id))
            .filter(|&(source, _)| source == s)
            .map(|(_, k)| k)
            .collect();
        let whole = delivered.len() as u64 / len * len;
        for pass in delivered[..whole as usize].chunks(len as usize) {
            let seen: HashSet<u64> = pass.iter().copied().collect();
            assert_eq!(
                seen.len() as u64,
                len,
                "source {s}: a pass repeats a sample"
            );
        }
        assert!(whole >= len, "source {s}: not one whole pass in 20 epochs");
        // Passes differ (each its own permutation).
        if whole >= 2 * len {
            assert_ne!(
                delivered[..len as usize],
                delivered[len as usize..2 * len as usize]
            );
        }
    }
    assert_eq!(mixture.pass_at(0, 3), (21, 0));
    assert_eq!(mixture.pass_at(1, 3), (0, 900));
}

#[test]
fn the_order_is_a_function_of_seed_and_epoch_alone() {
    let mixture = Mixture::new(&sources(&[(300, 2.0), (700, 1.0), (50, 1.0)]), None).unwrap();
    assert_eq!(mixture.epoch_len(), 1_050);
    assert_eq!(mixture.order(1, 4, true), mixture.order(1, 4, true));
    assert_ne!(mixture.order(1, 4, true), mixture.order(2, 4, true));
    assert_ne!(mixture.order(1, 4, true), mixture.order(1, 5, true));
    // Every id is the mixture's, and maps back to its source.
    for id in mixture.order(1, 4, true) {
        let (s, k) = mixture.source_of(id).unwrap();
        assert_eq!(mixture.offsets[s] + k, id);
    }
    assert_eq!(mixture.source_of(1_050), None);
    // Without shuffling: each source's places together, its samples in catalog order.
    let plain = mixture.order(1, 0, false);
    let first: Vec<u64> = plain[..525].to_vec();
    assert_eq!(first, (0..300).chain(0..225).collect::<Vec<u64>>());
}

#[test]
fn bad_mixtures_are_config_errors_naming_the_source() {
    let message =
        |spec: &[(usize, f64)], len| Mixture::new(&sources(spec), len).unwrap_err().to_string();
    assert!(message(&[], None).contains("at least one source"));
    assert!(message(&[(10, 1.0), (0, 1.0)], None).contains("source 1 has no sample"));
    assert!(message(&[(10, 0.0)], None).contains("weight 0"));
    assert!(message(&[(10, f64::NAN)], None).contains("positive and finite"));
    assert!(message(&[(10, 1.0)], Some(0)).contains("at least one sample"));
}
