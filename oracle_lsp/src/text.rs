//! Positions: byte offsets in a plan (what its spans hold) to and from the protocol's
//! line/character positions, whose characters are UTF-16 code units (the protocol's default
//! encoding, and the only one every client speaks). Lines end at `\n`, `\r\n` or a lone `\r`,
//! as the protocol says. Total: any offset and any position map to something, never a panic.

use lsp_types::{Position, Range};
use oracle_plan::ast::Span;

/// Where each line of a text starts, for converting both ways in O(log lines).
#[derive(Clone, Debug)]
pub struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    pub fn new(src: &str) -> LineIndex {
        let mut starts = vec![0];
        let bytes = src.as_bytes();
        for (i, &b) in bytes.iter().enumerate() {
            let lone_cr = b == b'\r' && bytes.get(i + 1) != Some(&b'\n');
            if b == b'\n' || lone_cr {
                starts.push(i + 1);
            }
        }
        LineIndex { starts }
    }

    /// The protocol position of byte `offset` (clamped to the text, and back to a character
    /// boundary).
    pub fn position(&self, src: &str, offset: u32) -> Position {
        let mut offset = (offset as usize).min(src.len());
        while !src.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self
            .starts
            .partition_point(|&s| s <= offset)
            .saturating_sub(1);
        let start = self.starts.get(line).copied().unwrap_or(0).min(offset);
        let character: usize = src[start..offset].chars().map(char::len_utf16).sum();
        Position::new(to_u32(line), to_u32(character))
    }

    pub fn range(&self, src: &str, span: Span) -> Range {
        Range::new(
            self.position(src, span.start),
            self.position(src, span.end.max(span.start)),
        )
    }

    /// The byte offset of a protocol position: a line past the end is the end of the text, a
    /// character past the end of its line is the line's end, and one inside a surrogate pair
    /// is the start of that character.
    pub fn offset(&self, src: &str, pos: Position) -> usize {
        let Some(&start) = self.starts.get(pos.line as usize) else {
            return src.len();
        };
        let next = self
            .starts
            .get(pos.line as usize + 1)
            .copied()
            .unwrap_or(src.len());
        let line = src.get(start..next).unwrap_or("");
        let line = line.strip_suffix('\n').unwrap_or(line);
        let line = line.strip_suffix('\r').unwrap_or(line);
        let mut units = 0usize;
        for (i, c) in line.char_indices() {
            units += c.len_utf16();
            if units > pos.character as usize {
                return start + i;
            }
        }
        start + line.len()
    }
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_count_utf16_units() {
        // `é` is one unit, `😀` two (a surrogate pair), in both directions.
        let src = "ab\né😀x\r\nz\rq";
        let ix = LineIndex::new(src);
        let x = src.find('x').unwrap() as u32;
        assert_eq!(ix.position(src, x), Position::new(1, 3));
        assert_eq!(ix.offset(src, Position::new(1, 3)), x as usize);
        // Inside the pair: the start of the emoji.
        assert_eq!(ix.offset(src, Position::new(1, 2)), src.find('😀').unwrap());
        assert_eq!(
            ix.position(src, src.find('z').unwrap() as u32),
            Position::new(2, 0)
        );
        assert_eq!(
            ix.position(src, src.find('q').unwrap() as u32),
            Position::new(3, 0)
        );
        // Past the end of a line, and past the last line.
        assert_eq!(ix.offset(src, Position::new(0, 99)), 2);
        assert_eq!(ix.offset(src, Position::new(99, 0)), src.len());
        // An offset inside a character goes back to its start.
        let e = src.find('é').unwrap() as u32;
        assert_eq!(ix.position(src, e + 1), Position::new(1, 0));
    }
}
