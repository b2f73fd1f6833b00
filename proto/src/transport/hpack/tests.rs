use super::*;
use proptest::prelude::*;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn decode_all(decoder: &mut Decoder, block: &[u8]) -> Result<Vec<(String, String)>, HpackError> {
    let mut out = Vec::new();
    decoder.decode(block, |n, v, _| {
        out.push((
            String::from_utf8_lossy(n).into_owned(),
            String::from_utf8_lossy(v).into_owned(),
        ))
    })?;
    Ok(out)
}

fn fields(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

/// RFC 7541 C.3 and C.4: the same three requests without and with Huffman coding.
#[test]
fn rfc7541_request_examples() {
    let first = fields(&[
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "www.example.com"),
    ]);
    let mut second = first.clone();
    second.push(("cache-control".into(), "no-cache".into()));
    let third = fields(&[
        (":method", "GET"),
        (":scheme", "https"),
        (":path", "/index.html"),
        (":authority", "www.example.com"),
        ("custom-key", "custom-value"),
    ]);
    for blocks in [
        [
            "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
            "8286 84be 5808 6e6f 2d63 6163 6865",
            "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
        ],
        [
            "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
            "8286 84be 5886 a8eb 1064 9cbf",
            "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
        ],
    ] {
        let mut d = Decoder::new(DEFAULT_TABLE_SIZE);
        assert_eq!(decode_all(&mut d, &hex(blocks[0])).unwrap(), first);
        assert_eq!(decode_all(&mut d, &hex(blocks[1])).unwrap(), second);
        assert_eq!(decode_all(&mut d, &hex(blocks[2])).unwrap(), third);
        // custom-key (54), cache-control (53), :authority (57).
        assert_eq!(d.size, 164);
        assert_eq!(d.table.len(), 3);
    }
}

#[test]
fn small_tables_evict_oldest_first() {
    let mut d = Decoder::new(DEFAULT_TABLE_SIZE);
    // Shrink to 100: room for one entry of 32 + 10 + 15 = 57 only.
    let mut block = vec![0x3f, 0x45]; // size update to 31 + 69 = 100
    block.extend(hex("410f 7777 772e 6578 616d 706c 652e 636f 6d")); // :authority www.example.com
    block.extend(hex("410f 7777 772e 6578 616d 706c 652e 636f 6e")); // ... .con
    let out = decode_all(&mut d, &block).unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(d.table.len(), 1);
    assert_eq!(
        decode_all(&mut d, &[0x80 | 62]).unwrap()[0].1,
        "www.example.con"
    );
    assert_eq!(
        decode_all(&mut d, &[0x80 | 63]),
        Err(HpackError::BadIndex(63))
    );
}

#[test]
fn bad_blocks_are_errors() {
    let mut d = Decoder::new(DEFAULT_TABLE_SIZE);
    assert_eq!(decode_all(&mut d, &[0x80]), Err(HpackError::BadIndex(0)));
    assert_eq!(decode_all(&mut d, &[0xff]), Err(HpackError::Truncated));
    assert_eq!(
        decode_all(&mut d, &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
        Err(HpackError::IntegerOverflow)
    );
    assert_eq!(
        decode_all(&mut d, &[0x40, 0x05, b'a']),
        Err(HpackError::Truncated)
    );
    // A size update after a field, or above the limit.
    assert!(matches!(
        decode_all(&mut d, &[0x82, 0x20]),
        Err(HpackError::BadSizeUpdate(0))
    ));
    assert!(matches!(
        decode_all(&mut Decoder::new(4096), &[0x3f, 0xe2, 0x1f]),
        Err(HpackError::BadSizeUpdate(4097))
    ));
    // Huffman: the EOS code inside a string.
    assert_eq!(
        decode_all(&mut d, &[0x00, 0x84, 0xff, 0xff, 0xff, 0xff, 0x00]),
        Err(HpackError::Huffman)
    );
}

proptest! {
    #[test]
    fn decodes_what_a_real_encoder_writes(
        requests in proptest::collection::vec(
            proptest::collection::vec(("[a-z-]{1,12}", "[ -~]{0,40}", any::<bool>()), 1..8),
            1..30,
        ),
        resize_at in 0usize..30,
        resize_to in 0u32..5000,
    ) {
        let mut encoder = httlib_hpack::Encoder::default();
        let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE * 2);
        for (i, request) in requests.iter().enumerate() {
            let mut block = Vec::new();
            if i == resize_at {
                encoder.update_max_dynamic_size(resize_to, &mut block).unwrap();
            }
            for (name, value, huffman) in request {
                let flags = 0x4 | 0x10 | if *huffman { 0x3 } else { 0 };
                encoder
                    .encode((name.as_bytes().to_vec(), value.as_bytes().to_vec(), flags), &mut block)
                    .unwrap();
            }
            let expected: Vec<(String, String)> =
                request.iter().map(|(n, v, _)| (n.clone(), v.clone())).collect();
            prop_assert_eq!(decode_all(&mut decoder, &block).unwrap(), expected);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(block in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
        let _ = decode_all(&mut decoder, &block);
        prop_assert!(decoder.size <= decoder.max_size.max(DEFAULT_TABLE_SIZE));
    }
}
