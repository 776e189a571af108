use super::*;

#[test]
fn quorum_is_a_strict_majority() {
    assert_eq!(quorum(1), 1);
    assert_eq!(quorum(3), 2);
    assert_eq!(quorum(4), 3);
    assert_eq!(quorum(5), 3);
    assert_eq!(fault_tolerance(3, 3), Some(1));
    assert_eq!(fault_tolerance(3, 2), Some(0));
    assert_eq!(fault_tolerance(3, 1), None);
    assert_eq!(fault_tolerance(0, 0), None);
}
