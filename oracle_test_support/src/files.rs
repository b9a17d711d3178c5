//! File chores of tests: copying a fixture tree into a scratch directory, listing what a
//! command left in one.

use std::fs;
use std::path::Path;

/// Copies the tree at `from` into `to` (created if missing): every directory and regular
/// file, recursively, with its bytes. Panics on any error, naming nothing more: a test's
/// fixture that cannot be copied is a broken test.
pub fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The names of the entries of `dir` (files and directories, not recursive), sorted, so two
/// listings compare equal exactly when the directory holds the same names.
pub fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copied_tree_lists_the_same_names_and_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("from");
        fs::create_dir_all(from.join("sub")).unwrap();
        fs::write(from.join("b.txt"), "b").unwrap();
        fs::write(from.join("sub/a.txt"), "a").unwrap();
        let to = dir.path().join("to");
        copy_dir(&from, &to);
        assert_eq!(file_names(&to), ["b.txt", "sub"]);
        assert_eq!(fs::read(to.join("sub/a.txt")).unwrap(), b"a");
    }
}
